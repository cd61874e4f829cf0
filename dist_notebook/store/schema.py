"""Tables of the run store and how a connection to it is opened.

The kernel writes, other processes (the Jupyter server) read while a run goes on:
WAL mode lets readers proceed during writes. The file is created readable by its
owner only (it holds code and metrics of the user's runs).
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import tempfile
from pathlib import Path

from .. import envvars

SCHEMA_VERSION = 4

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS clusters (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    backend TEXT,
    n INTEGER NOT NULL,
    started REAL NOT NULL,
    stopped REAL,
    kernel_pid INTEGER,
    profile_dir TEXT,
    ipp_cluster_id TEXT
);
CREATE TABLE IF NOT EXISTS ranks (
    cluster_id TEXT NOT NULL,
    rank INTEGER NOT NULL,
    host TEXT,
    pid INTEGER,
    device TEXT,
    state TEXT NOT NULL,
    engine_id INTEGER,
    node_rank INTEGER,
    PRIMARY KEY (cluster_id, rank)
);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    cluster_id TEXT NOT NULL,
    state TEXT NOT NULL,
    started REAL NOT NULL,
    ended REAL,
    steps INTEGER,
    code TEXT,
    error TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_name ON runs (name);
CREATE TABLE IF NOT EXISTS run_ranks (
    run_id TEXT NOT NULL,
    rank INTEGER NOT NULL,
    state TEXT NOT NULL,
    error TEXT,
    PRIMARY KEY (run_id, rank)
);
CREATE TABLE IF NOT EXISTS metrics (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    rank INTEGER NOT NULL,
    step INTEGER,
    time REAL NOT NULL,
    data TEXT NOT NULL,
    step_time REAL,
    comm_time REAL,
    samples REAL,
    gpu TEXT,
    cpu_time REAL,
    run_delay REAL,
    load REAL,
    cores REAL,
    data_time REAL,
    peak_mem REAL
);
CREATE INDEX IF NOT EXISTS metrics_by_run ON metrics (run_id, seq);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL,
    cluster_id TEXT,
    run_id TEXT,
    rank INTEGER,
    kind TEXT NOT NULL,
    message TEXT
);
"""


class StoreError(RuntimeError):
    """The run store cannot be opened or used; the message names the fix."""


class StoreLocked(StoreError):
    """Another program holds the store locked for longer than a write waits: the write
    can succeed later, unlike one to a damaged or read-only store."""


def is_locked(e: BaseException) -> bool:
    """Whether a SQLite error is another connection's lock (SQLITE_BUSY or _LOCKED)."""
    text = str(e).lower()
    return isinstance(e, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def is_full(e: BaseException) -> bool:
    """Whether an error is a full disk (SQLite's SQLITE_FULL, or ENOSPC/EDQUOT)."""
    if isinstance(e, OSError):
        return e.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(e, sqlite3.Error) and "full" in str(e).lower()


def full_disk_message(path: Path, e: BaseException) -> str:
    return (
        f"the disk under the run store at {path} is full ({e}): free space there, or set "
        f"{envvars.STORE} to a file on another disk"
    )


def connect(path: Path, *, create: bool, setup: bool = True) -> sqlite3.Connection:
    """Open the store at *path*; create it (owner-only) when *create* is true.

    A store in a read-only directory (a shared or archived one) still opens for reading:
    SQLite cannot create the write-ahead log's index there, so it is opened immutable.
    With *setup* false the tables are left to ``ensure_schema`` (a writer does that when
    the store is not locked by another program); a store that is up to date needs no
    write for it, so opening it never waits for another program's lock.
    Raises StoreLocked when another program's lock outlasts the wait.
    """
    if not create and not path.exists():
        raise StoreError(f"no run store at {path}: start a cluster first, or set {envvars.STORE}")
    try:
        if create:
            _create_file(path)
        try:
            conn = _open(str(path), uri=False)
        except sqlite3.OperationalError as e:
            if create or is_locked(e) or _writable(path.parent):
                raise
            conn = _open(f"{path.resolve().as_uri()}?immutable=1", uri=True)
        if create and setup:
            try:
                ensure_schema(conn)
            except BaseException:
                conn.close()
                raise
        return conn
    except OSError as e:
        if is_full(e):
            raise StoreError(full_disk_message(path, e)) from e
        raise StoreError(
            f"cannot create the run store at {path} ({e.strerror or e}): set "
            f"{envvars.STORE} to a file in a directory you can write"
        ) from e
    except sqlite3.DatabaseError as e:
        raise opening_error(path, e) from e


def opening_error(path: Path, e: sqlite3.DatabaseError) -> StoreError:
    """The StoreError for a SQLite error met while opening or setting up the store."""
    if is_locked(e):
        return StoreLocked(
            f"the run store at {path} is locked by another program ({e}); its writes wait"
            " in memory and are written once it is free"
        )
    if is_full(e):
        return StoreError(full_disk_message(path, e))
    if "readonly" in str(e) or "read-only" in str(e) or not _writable(path.parent):
        return StoreError(
            f"the run store at {path} is read-only ({e}): runs are not recorded; set "
            f"{envvars.STORE} to a file in a directory you can write"
        )
    return StoreError(
        f"the run store at {path} cannot be used ({e}); move it away or set "
        f"{envvars.STORE} to another file"
    )


# Every table and index SCHEMA makes: when all exist at this version, opening writes nothing.
_OBJECTS = frozenset(re.findall(r"IF NOT EXISTS (\w+)", SCHEMA))


def ensure_schema(conn: sqlite3.Connection) -> None:
    """WAL mode, the tables, and migrations from older versions; writes only what is
    missing (an up-to-date store is only read, so another program's lock is no wait)."""
    if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    if _up_to_date(conn):
        return
    conn.executescript(SCHEMA)
    _migrate(conn)
    conn.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
        (str(SCHEMA_VERSION),),
    )


def _up_to_date(conn: sqlite3.Connection) -> bool:
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master").fetchall()}
    if not _OBJECTS <= names:
        return False
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return row is not None and row[0] == str(SCHEMA_VERSION)


def _create_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))


def _open(target: str, *, uri: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(
        target, timeout=5.0, check_same_thread=False, isolation_level=None, uri=uri
    )
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout = 5000")
    # Reads the file's header: a file that is not a database fails here, at open,
    # with the message of connect(), not later in the middle of a query.
    conn.execute("PRAGMA schema_version").fetchone()
    return conn


def _writable(directory: Path) -> bool:
    """Whether files can be created in *directory* (root ignores modes, not a read-only
    mount: os.access alone does not say)."""
    if not os.access(directory, os.W_OK):
        return False
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".dist-notebook-probe-")
    except OSError:
        return False
    os.close(fd)
    os.remove(probe)
    return True


# Version 2 keeps the system's fields of a record (dist_notebook.protocol) in columns of
# their own, apart from the user's metrics in `data`; records of version 1 keep them in
# `data`, where the reader still finds them.
_V2_COLUMNS = ("step_time", "comm_time", "samples", "gpu")
# Version 4: the step's measures (protocol.STEP_MEASURES); records stored before have none.
V4_COLUMNS = ("cpu_time", "run_delay", "load", "cores", "data_time", "peak_mem")


def metrics_columns(conn: sqlite3.Connection) -> set[str]:
    return columns(conn, "metrics")


def columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})").fetchall()}


def _migrate(conn: sqlite3.Connection) -> None:
    # Version 3: each rank's node (its host's place in the cluster's node order). Ranks
    # recorded before it have none (NULL): they ran on one machine, or ungrouped.
    if "node_rank" not in columns(conn, "ranks"):
        conn.execute("ALTER TABLE ranks ADD COLUMN node_rank INTEGER")
    have = metrics_columns(conn)
    for column in (*_V2_COLUMNS, *V4_COLUMNS):
        if column not in have:
            kind = "TEXT" if column == "gpu" else "REAL"
            conn.execute(f"ALTER TABLE metrics ADD COLUMN {column} {kind}")
    if "step_time" not in have:
        # Move version 1's system fields out of the user's metrics, once.
        conn.execute(
            "UPDATE metrics SET step_time = json_extract(data, '$.step_time'),"
            " comm_time = json_extract(data, '$.comm_time'),"
            " samples = json_extract(data, '$.samples'),"
            " data = json_remove(data, '$.step_time', '$.comm_time', '$.samples')"
        )
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))

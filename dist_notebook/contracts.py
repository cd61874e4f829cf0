"""The shapes that cross the wire between Python and the front end, declared once.

``protocol.py`` holds the record, the states and the derived measures; this module holds
the rest: each answer of the server extension's REST API (``server/routes.py`` lists the
routes) and each message of the cell's live view (``display/live.py`` to
``extension/src/chart/widget.ts`` and back). The Python producers are annotated with these
TypedDicts, so mypy checks what they build; the front end's interfaces are generated from
them (``python -m dist_notebook.contracts > extension/src/contracts.ts``, or ``make
ext-generate``); tests/unit/test_contracts.py fails when the committed file is out of
date, and tests/server/test_api_contracts.py when a real server's answer has a key more
or less than declared here.

A field typed ``Wire[T, "Name"]`` is ``T`` in Python and the TypeScript type ``Name`` of
``protocol.ts`` (a state, the record, the summary), which the generated file imports.
"""

import ast
import inspect
import sys
from typing import (
    Annotated,
    Any,
    Literal,
    TypedDict,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from .protocol import ClusterState, EngineState, RunRankState, RunState


class _TsName(str):
    """Marks a Python type as a named TypeScript type of protocol.ts."""


def _ts(name: str) -> _TsName:
    return _TsName(name)


# protocol.ts names used below; a field's Python type is what the producer holds.
ClusterStateName = Annotated[str, _ts(ClusterState.__name__)]
EngineStateName = Annotated[str, _ts(EngineState.__name__)]
RunStateName = Annotated[str, _ts(RunState.__name__)]
RunRankStateName = Annotated[str, _ts(RunRankState.__name__)]
# protocol.Record.to_json(seq) and protocol.RunSummary.to_json()
SeqRecordJson = Annotated[dict[str, Any], _ts("ISeqRecord")]
RecordJson = Annotated[dict[str, Any], _ts("IRecord")]
RunSummaryJson = Annotated[dict[str, Any], _ts("IRunSummary")]

ClusterAction = Literal["interrupt", "stop"]
ActionVia = Literal["kernel", "server", "none"]


# --- REST answers (GET/POST/DELETE under {base_url}/dist-notebook/api/) ----------------
class RankModel(TypedDict):
    """One rank of a cluster: an ipyparallel engine with its torch rank."""

    rank: int
    host: str | None
    pid: int | None
    device: str | None
    state: EngineStateName
    engine_id: int | None
    # The rank's node (its host's place in node order); null in stores before it.
    node_rank: int | None


class DetachedModel(TypedDict):
    """What the store says of a detached cluster's keeper."""

    keeper: int
    # Seconds unused before the keeper stops the cluster; null: never.
    idle_timeout: float | None


class ClusterModel(TypedDict):
    """A cluster as GET clusters and GET clusters/<id> answer it."""

    id: str
    state: ClusterStateName
    backend: str | None
    n: int
    started: float
    stopped: float | None
    kernel_pid: int | None
    # A detached cluster's keeper (it outlives kernels): null for a kernel's own.
    detached: DetachedModel | None
    # Why the server will not interrupt or stop it (a store or profile folder that is not
    # this user's own): the panel shows it without its buttons. Null: they act.
    read_only: str | None
    ranks: list[RankModel]


class RunModel(TypedDict):
    """A run as GET runs lists it (without its code)."""

    id: str
    name: str
    cluster_id: str
    state: RunStateName
    started: float
    ended: float | None
    steps: int | None
    error: str | None


class RunRankModel(TypedDict):
    """The state of one rank in one run."""

    rank: int
    state: RunRankStateName
    error: str | None


class _ExportKeys(TypedDict):
    tool: Literal["tensorboard", "mlflow"]
    # The run directory (TensorBoard) or the tracking URI (MLflow).
    location: str
    # A web address to open, when the tool serves one (an MLflow tracking server).
    url: str | None


class ExportModel(_ExportKeys, total=False):
    """One export of a run: a TensorBoard log directory or an MLflow run."""

    # The command that shows it, e.g. `tensorboard --logdir DIR`.
    command: str
    logdir: str  # TensorBoard
    experiment_id: str  # MLflow
    run_id: str  # MLflow


class RunDetailModel(RunModel):
    """A run as GET runs/<id> answers it: its code, flags, ranks, output and exports."""

    code: str | None
    ranks: list[RunRankModel]
    # The flags the run was started with (`%%dist_train --name ...`).
    flags: str | None
    # The last lines of each rank's output, by rank.
    output: dict[str, str]
    # Where the run was exported, oldest first.
    exports: list[ExportModel]


class MetricsPage(TypedDict):
    """The answer of GET runs/<id>/metrics?since=<seq>&limit=<n>."""

    run: str
    since: int
    # Pass as since next time (equal to since when nothing is new).
    last_seq: int
    # True when the answer was cut at its limit: ask again at once.
    more: bool
    records: list[SeqRecordJson]


class _ActionKeys(TypedDict):
    id: str
    action: ClusterAction
    state: ClusterStateName
    # Who acted: the owning kernel, the server (its kernel is gone), or none (ended).
    via: ActionVia


class ActionReply(_ActionKeys, total=False):
    """The answer of POST clusters/<id>/interrupt and clusters/<id>/stop."""

    # The kernel's word on what it did, e.g. "run digits cancelled" (via kernel).
    result: str | None
    # The store could not record what the server did (via server).
    warning: str


class DeleteReply(TypedDict):
    """The answer of DELETE runs/<id>."""

    id: str
    deleted: bool


class PruneReply(TypedDict):
    """The answer of POST runs/prune: how many runs and clusters were deleted."""

    runs: int
    clusters: int


# --- the live view's widget messages ----------------------------------------------------
class LiveTraits(TypedDict):
    """The synced traits of the live view's model (display/live.py: LiveRunWidget)."""

    name: str
    run_id: str
    state: RunStateName
    steps: int | None
    started: float
    rank_states: dict[str, RunRankStateName]
    # False where a click cannot reach the kernel while the cell blocks (Stop hidden).
    stoppable: bool
    # The end's picture and table as HTML, once the run ended ("" before).
    final: str


class _RecordsKeys(TypedDict):
    kind: Literal["records"]
    records: list[RecordJson]
    # Null: keep the last summary (it is sent less often past 64 ranks).
    summary: RunSummaryJson | None
    # The kernel's time.time() when sent: the view's clock skew.
    clock: float


class RecordsMessage(_RecordsKeys, total=False):
    """Kernel -> view: the records that came in since the last message."""

    # The whole history so far (for a view that came late): drop what you had.
    reset: bool


class HelloMessage(TypedDict):
    """View -> kernel: a new model asks for the history (answered with reset)."""

    kind: Literal["hello"]


class StopMessage(TypedDict):
    """View -> kernel: the Stop button (the run is cancelled)."""

    kind: Literal["stop"]


ViewMessage = HelloMessage | StopMessage

REST = (
    RankModel,
    DetachedModel,
    ClusterModel,
    RunModel,
    RunRankModel,
    ExportModel,
    RunDetailModel,
    MetricsPage,
    ActionReply,
    DeleteReply,
    PruneReply,
)
WIDGET = (LiveTraits, RecordsMessage, HelloMessage, StopMessage)
ALIASES: dict[str, Any] = {
    "ClusterAction": ClusterAction,
    "ActionVia": ActionVia,
    "ViewMessage": ViewMessage,
}


VIEW_KINDS = frozenset(get_args(get_type_hints(m)["kind"])[0] for m in get_args(ViewMessage))


def view_message_kind(content: Any) -> str | None:
    """The kind of a message from the view (one of VIEW_KINDS), else None."""
    kind = content.get("kind") if isinstance(content, dict) else None
    return kind if kind in VIEW_KINDS else None


# --- TypeScript -------------------------------------------------------------------------
_TS_HEADER = """\
/**
 * Generated from dist_notebook/contracts.py by `python -m dist_notebook.contracts`
 * (or `make ext-generate`); do not edit (tests/unit/test_contracts.py fails when this
 * file is out of date). The REST API's answers and the live view's widget messages.
 */"""
_IMPORTED = (
    "ClusterState",
    "EngineState",
    "IRecord",
    "IRunSummary",
    "RunRankState",
    "RunState",
)


def _ts_type(tp: Any, named: bool = True) -> str:
    """The TypeScript of *tp*; an alias of ALIASES by its name unless not *named*."""
    for name, alias in ALIASES.items():
        if named and tp == alias:
            return name
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        names = [a for a in tp.__metadata__ if isinstance(a, _TsName)]
        return str(names[0]) if names else _ts_type(args[0])
    if origin in (Union, type(int | None)):
        return " | ".join(_ts_type(a) for a in args)
    if origin is Literal:
        return " | ".join(f"'{a}'" for a in args)
    if origin is list:
        return f"{_ts_type(args[0])}[]"
    if origin is dict:
        return f"{{ [name: string]: {_ts_type(args[1])} }}"
    if tp is type(None):
        return "null"
    simple = {int: "number", float: "number", str: "string", bool: "boolean"}
    if tp in simple:
        return simple[tp]
    if is_typeddict(tp):
        return f"I{tp.__name__}"
    raise TypeError(f"no TypeScript type for {tp!r}")


def _field_docs(cls: Any) -> dict[str, str]:
    """Each field's comment in this module's source (the lines above it, or its tail),
    its bases' fields included."""
    lines = inspect.getsource(sys.modules[__name__]).splitlines()
    classes = {n.name: n for n in ast.parse("\n".join(lines)).body if isinstance(n, ast.ClassDef)}
    docs: dict[str, str] = {}
    node = classes[cls.__name__]
    for base in node.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            docs.update(_field_docs(getattr(sys.modules[__name__], base.id)))
    for item in node.body:
        if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
            continue
        above: list[str] = []
        i = item.lineno - 2
        while lines[i].strip().startswith("#"):
            above.insert(0, lines[i].strip().lstrip("# "))
            i -= 1
        tail = lines[item.lineno - 1].partition("  # ")[2]
        if above or tail:
            docs[item.target.id] = " ".join(above + ([tail] if tail else []))
    return docs


def _ts_interface(cls: Any) -> str:
    doc = " ".join((cls.__doc__ or "").split())
    lines = [f"/** {doc} */", f"export interface I{cls.__name__} {{"]
    docs = _field_docs(cls)
    for name, tp in get_type_hints(cls, include_extras=True).items():
        if name in docs:
            lines.append(f"  /** {docs[name]} */")
        mark = "?" if name in cls.__optional_keys__ else ""
        lines.append(f"  {name}{mark}: {_ts_type(tp)};")
    return "\n".join(lines + ["}"])


def typescript() -> str:
    """The TypeScript side of these contracts (extension/src/contracts.ts)."""
    out = [_TS_HEADER, f"import type {{ {', '.join(_IMPORTED)} }} from './protocol';"]
    out.append(
        "/** A record as GET runs/<id>/metrics carries it: the protocol's, with its sequence. */\n"
        "export type ISeqRecord = IRecord & { seq: number };"
    )
    for name, alias in ALIASES.items():
        if name != "ViewMessage":
            out.append(f"export type {name} = {_ts_type(alias, named=False)};")
    out.extend(_ts_interface(cls) for cls in REST)
    out.extend(_ts_interface(cls) for cls in WIDGET)
    members = " | ".join(_ts_type(m) for m in get_args(ViewMessage))
    out.append(f"/** What a view sends its kernel. */\nexport type ViewMessage = {members};")
    traits = ", ".join(f"'{k}'" for k in get_type_hints(LiveTraits))
    out.append(
        "/** The names of LiveTraits: the traits a view listens to. */\n"
        f"export const LIVE_TRAITS: readonly (keyof ILiveTraits)[] = [{traits}];"
    )
    return "\n\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(typescript())

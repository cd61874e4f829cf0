"""The text of an exported torchrun script, from what the ranks ran (magics/history.py).

What goes in, in this order (the state the notebook's last training started from):

1. the ``%%dist`` cells and ``%dist_push`` values before the last ``%%dist_train``, each
   once: a re-run cell in its last version before that training, at the place of that
   run (execution order);
2. that training cell, inside ``with job.run(...)`` (recorded in the run store);
3. the ``%%dist`` cells run after it (an evaluation, a save), the same way.

Only entries of the engines the training ran on count: a restart gave the ranks new
engines, which never ran what came before it. A cell sent to some ranks (``--ranks``) runs
under ``if rank in (...)``. Pushed values that the cells use are written as Python literals
when they are plain data (numbers, strings, lists, dicts of those), else pickled beside the
script; a value that cannot be either is refused with the fix. Code is written as the
user typed it; everything we add (names, paths, flags) is a ``repr()`` literal.
"""

from __future__ import annotations

import ast
import io
import math
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .. import envvars

LITERAL_MAX = 2000  # characters: a longer value goes in the pickle, not the script


class ExportError(ValueError):
    """The notebook cannot be exported as it is; the message names the fix."""


@dataclass(frozen=True)
class Part:
    kind: str  # "dist", "push" or "train"
    code: str
    count: int | None
    ranks: tuple[int, ...] | None = None
    name: str = ""  # push: the variable
    kernel: int | None = None  # the pid of the (earlier) kernel that ran it, if not this one

    @property
    def label(self) -> str:
        where = _where(self)
        magic = {"dist": "%%dist", "train": "%%dist_train", "push": "%dist_push"}[self.kind]
        if self.ranks is not None:
            magic += f" --ranks {','.join(map(str, self.ranks))}"
        return f"{magic} ({where})"


@dataclass
class Plan:
    before: list[Part]
    train: Part
    after: list[Part]
    left_out: list[str] = field(default_factory=list)  # notes for the user


def select(entries: Sequence[Any], train: Any) -> Plan:
    """The parts of the script from the history *entries* and its last *train* entry."""
    same = [e for e in entries if e.engines.pids == train.engines.pids]
    same = [e for e in same if e.engines.cluster_id == train.engines.cluster_id]
    before = [e for e in same if e.seq < train.seq]
    after = [e for e in same if e.seq > train.seq and e.kind != "train"]
    plan = Plan(_last_versions(before), _part(train), _last_versions(after))
    earlier = [e for e in before if e.kind == "train"]
    if earlier:
        plan.left_out.append(
            f"{len(earlier)} earlier %%dist_train run(s) on these ranks are not in the"
            " script: if the last run went on from their weights, its loss will differ"
        )
    gone = [e for e in entries if e.seq < train.seq and e not in same]
    if gone:
        plan.left_out.append(
            f"{len(gone)} cell(s) that ran before the cluster was restarted or replaced"
            " are left out (the ranks lost what they did)"
        )
    return plan


def _last_versions(entries: Sequence[Any]) -> list[Part]:
    last: dict[str, Any] = {}
    for e in entries:
        if e.kind == "train":
            continue
        last.pop(e.key, None)
        last[e.key] = e  # re-inserted: its place is its last run's
    return [_part(e) for e in last.values()]


def _part(e: Any) -> Part:
    if e.kind == "push":
        return Part("push", "", e.count, name=e.code, kernel=getattr(e, "kernel", None))
    return Part(e.kind, e.code, e.count, e.ranks, kernel=getattr(e, "kernel", None))


def check_python(part: Part) -> None:
    """ExportError unless the cell is plain Python a script can run (no IPython syntax,
    no ``await`` outside a function, which a rank's cell allows)."""
    try:
        tree = ast.parse(part.code)
    except SyntaxError as e:
        line = (e.text or "").strip() or f"line {e.lineno}"
        raise ExportError(
            f"{part.label} is not plain Python ({line!r}: {e.msg}): a script cannot run"
            " IPython syntax such as !commands or %magics; rewrite that line in Python"
            " (subprocess.run for a shell command), run the cell again, then export"
        ) from None
    try:
        compile(tree, part.label, "exec", dont_inherit=True)
    except SyntaxError as e:
        line = (e.text or "").strip() or f"line {e.lineno}"
        fix = (
            "put the awaits in an async def main() and call asyncio.run(main())"
            if "await" in e.msg or "async" in e.msg
            else "rewrite that line"
        )
        raise ExportError(
            f"{part.label} does not compile as a script ({line!r}: {e.msg}): {fix}, run"
            " the cell again, then export"
        ) from None


def split_future(code: str) -> tuple[list[str], str]:
    """The cell's ``from __future__ import`` statements, and its code without them: in
    a script they must come first, before the set-up (``compose`` puts them there). A
    statement alone on its lines becomes a comment; one sharing a line (``;``) ``pass``."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return [], code  # check_python says why
    found = [
        node
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == "__future__"
    ]
    if not found:
        return [], code
    lines = code.splitlines(keepends=True)
    statements: list[str] = []
    for node in reversed(found):  # from the end: earlier positions stay valid
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        start, end = node.col_offset, node.end_col_offset or len(lines[last])
        text = "".join(lines[first : last + 1])
        head, tail = lines[first][:start], lines[last][end:]
        statement = "from __future__ import " + ", ".join(a.name for a in node.names)
        statements.insert(0, statement)
        alone = not head.strip() and (not tail.strip() or tail.lstrip().startswith("#"))
        if alone:
            newline = "\n" if text.endswith("\n") else ""
            lines[first : last + 1] = [f"{head}# {statement}: at the script's top{newline}"]
        else:
            lines[first : last + 1] = [head + "pass" + tail]
    return statements, "".join(lines)


def names_used(parts: Iterable[Part]) -> set[str]:
    """Every name the parts' code reads or binds (a pushed name not in it is not needed)."""
    names: set[str] = set()
    for part in parts:
        if part.kind == "push":
            continue
        for node in ast.walk(ast.parse(part.code)):
            if isinstance(node, ast.Name):
                names.add(node.id)
    return names


def literal(value: Any) -> str | None:
    """*value* as Python source that gives it back, or None (not plain data)."""
    if not _plain(value):
        return None
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4,300-digit limit for str(): pickled instead
        return None
    if len(text) > LITERAL_MAX:
        return None
    try:
        back = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return text if back == value and type(back) is type(value) else None


def _plain(value: Any, depth: int = 0) -> bool:
    if depth > 20:
        return False
    if value is None or type(value) in (bool, str, bytes):
        return True
    if type(value) is int:
        return value.bit_length() <= LITERAL_MAX * 4  # repr() past that is refused or long
    if type(value) is float:
        return math.isfinite(value)
    if type(value) in (list, tuple, set):
        return all(_plain(v, depth + 1) for v in value)
    if type(value) is dict:
        return all(_plain(k, depth + 1) and _plain(v, depth + 1) for k, v in value.items())
    return False


def indent(code: str, prefix: str) -> str:
    """*code* under a block: *prefix* on each line, but not inside a multi-line string
    (which would change the string's value)."""
    lines = code.splitlines(keepends=True)
    inside: set[int] = set()  # 1-based lines that continue a token begun above
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            (start, _), (end, _) = tok.start, tok.end
            inside.update(range(start + 1, end + 1))
    except (tokenize.TokenError, SyntaxError):
        pass  # check_python already refused code that does not parse
    out = []
    for number, line in enumerate(lines, start=1):
        keep = number in inside or not line.strip()
        out.append(line if keep else prefix + line)
    text = "".join(out)
    return text if text.endswith("\n") else text + "\n"


@dataclass
class Script:
    """What the script needs beyond the parts: set-up, the run's options, the values."""

    name: str  # the run's name in the store
    file_name: str
    backend: str
    timeout_s: float
    gpus: bool
    threads: int | None
    run_options: dict[str, Any]
    literals: dict[str, str]  # pushed name -> Python literal
    pickled: tuple[str, ...]  # pushed names read from values_file
    values_file: str | None
    origin: str  # which notebook run it reproduces
    when: str
    nproc: int


HEADER = '''"""{name}: a torchrun script exported by %dist_export from a notebook ({when}).

It reproduces {origin}.

On this machine:   torchrun --standalone --nproc-per-node {nproc} {file}
As a Slurm job:    sbatch {stem}.sbatch   (if exported with --sbatch)

The run is recorded in the run store ({store_var}, else the per-user default),
beside the notebook's runs: %dist_runs and the side panel list it.
The cells below replay what the notebook's ranks ran: the %%dist cells up to its last
%%dist_train (a re-run cell once, in its last version), that training, then the %%dist
cells run after it.
"""
{future}from dist_notebook.batch import runtime

# The rank set-up of the notebook's cluster (threads, device, process group, its
# backend and timeout), done before torch loads. threads=None: the host's cores over its
# ranks, as the cluster's engines.
job = runtime.setup(
    backend={backend!r}, timeout_s={timeout!r}, gpus={gpus!r}, threads={threads!r},
    values={values!r},
)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from dist_notebook import report  # noqa: E402
from dist_notebook.engine.checkpoint import checkpointer  # noqa: E402

# The names every cell finds on a rank of the notebook's cluster.
rank, world_size, local_rank, device = job.rank, job.world_size, job.local_rank, job.device
'''


def compose(plan: Plan, script: Script) -> str:
    """The script's text. Every name and path of ours in it is a ``repr()`` literal (or
    made safe in the docstring), so none can add a line of code; the cells' ``from
    __future__`` imports go to the top, where a script must have them."""
    stem = script.file_name[:-3] if script.file_name.endswith(".py") else script.file_name
    future: list[str] = []

    def hoisted(part: Part) -> Part:
        statements, code = split_future(part.code)
        future.extend(s for s in statements if s not in future)
        return replace(part, code=code) if statements else part

    plan = replace(
        plan,
        before=[hoisted(p) for p in plan.before],
        train=hoisted(plan.train),
        after=[hoisted(p) for p in plan.after],
    )
    parts = [
        HEADER.format(
            future="".join(f"{s}  # from the notebook's cells\n" for s in future),
            name=_doc(script.name),
            when=script.when,
            origin=_doc(script.origin),
            nproc=script.nproc,
            file=_doc(script.file_name),
            stem=_doc(stem),
            backend=script.backend,
            timeout=script.timeout_s,
            gpus=script.gpus,
            threads=script.threads,
            values=script.values_file,
            store_var=envvars.STORE,
        )
    ]
    for part in plan.before:
        parts.append(_section(part, script))
    parts.append(_train_section(plan.train, script))
    for part in plan.after:
        parts.append(_section(part, script))
    return "\n".join(parts)


def _doc(text: str) -> str:
    """*text* safe inside the script's docstring: no backslash, quote or control
    character (a newline, a NUL, a terminal escape) of it reaches the file."""
    text = text.replace("\\", "/").replace('"', "'")
    return "".join(c if c.isprintable() else "?" for c in text)


def _block(code: str) -> str:
    """*code* as a block's body: a body of comments alone needs a statement."""
    code = code if code.endswith("\n") else code + "\n"
    return code if ast.parse(code).body else code + "pass\n"


def _section(part: Part, script: Script) -> str:
    if part.kind == "push":
        if part.name in script.literals:
            body = f"{part.name} = {script.literals[part.name]}\n"
        elif part.name in script.pickled:
            body = f"{part.name} = job.pushed({part.name!r})\n"
        else:
            return ""  # not used by any cell
        return f"# ---- %dist_push {part.name} ({_where(part)}) ----\n{body}"
    code = part.code if part.code.endswith("\n") else part.code + "\n"
    if part.ranks is not None:
        code = f"if rank in {tuple(part.ranks)!r}:\n" + indent(_block(code), "    ")
    return f"# ---- {part.label} ----\n{code}"


def _train_section(part: Part, script: Script) -> str:
    # The training's own flags (--steps, --checkpoint-every ...), those it gave.
    given = {k: v for k, v in script.run_options.items() if v not in (None, False)}
    options = "".join(f", {k}={v!r}" for k, v in given.items())
    head = f"with job.run(name={script.name!r}{options}):\n"
    body = indent(_block(part.code), "    ")
    if part.ranks is not None:
        body = f"    if rank in {tuple(part.ranks)!r}:\n" + indent(_block(part.code), "        ")
    return f"# ---- {part.label}: recorded as run {script.name!r} ----\n{head}{body}"


def _where(part: Part) -> str:
    where = f"In [{part.count}]" if part.count is not None else "a cell"
    return where if part.kernel is None else f"{where} of kernel pid {part.kernel}"

"""The wheel's front end, built by the build backend (hatch-jupyter-builder's hook).

pyproject.toml names ``tools.frontend_build.build`` as the hook's build function: a wheel
or an sdist built from a checkout without the built front end runs ``npm ci`` (the
committed lock file, never a fresh resolution) and ``npm run build:prod`` in extension/,
which writes the labextension (dist_notebook/labextension) and the live view's anywidget
module (dist_notebook/display/static). The hook's ``ensured-targets`` then refuse a wheel
without them. It is hatch_jupyter_builder.npm_builder with ``npm ci`` in place of
``npm install``, and a missing or too old Node.js named with its fix before npm runs.

An editable install builds nothing here: ``make ext-build`` builds and links the front end
of a checkout (mk/extension.mk).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

NODE_MIN = (20, 19)
# a cold `npm ci` and production build take minutes on a busy 2-core machine
NPM_TIMEOUT_S = 1800
KEEP = [Path("dist_notebook/labextension/.gitkeep")]
FIX = (
    "install Node.js >= {min} with npm (https://nodejs.org, or your system's nodejs and npm "
    "packages) and build again; or build from an sdist, which carries the built front end"
)


class FrontEndBuildError(RuntimeError):
    """The front end cannot be built here; the message names the fix."""


def node_version(node: str) -> tuple[int, ...]:
    """(major, minor, patch) of the Node.js at *node*."""
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    m = re.match(r"v(\d+)\.(\d+)\.(\d+)", out.stdout.strip())
    if out.returncode != 0 or not m:
        raise FrontEndBuildError(f"{node} --version said {out.stdout.strip()!r}")
    return tuple(int(g) for g in m.groups())


def check_node() -> str:
    """The npm to run; FrontEndBuildError naming the fix when Node.js or npm is missing or
    older than NODE_MIN."""
    need = ".".join(map(str, NODE_MIN))
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        missing = " and ".join(n for n, p in (("node", node), ("npm", npm)) if p is None)
        verb = "are" if node is None and npm is None else "is"
        raise FrontEndBuildError(
            f"dist-notebook's front end is not built and {missing} {verb} not on PATH: "
            + FIX.format(min=need)
        )
    have = node_version(node)
    if have[:2] < NODE_MIN:
        raise FrontEndBuildError(
            f"dist-notebook's front end needs Node.js >= {need}, found "
            f"{'.'.join(map(str, have))} at {node}: " + FIX.format(min=need)
        )
    return npm


def build(
    target_name: str,
    version: str,
    path: str = "extension",
    build_cmd: str = "build:prod",
) -> None:
    """hatch-jupyter-builder's build function: ``npm ci`` then ``npm run BUILD_CMD`` in
    *path*; nothing for an editable install (``make ext-build`` does it)."""
    if version == "editable":
        return
    npm = check_node()
    where = Path(path).resolve()
    # the labextension's build empties its output folder, git's placeholder with it
    keep = [p for p in KEEP if p.exists()]
    for args in (["ci", "--no-audit", "--no-fund"], ["run", build_cmd]):
        try:
            done = subprocess.run([npm, *args], cwd=where, timeout=NPM_TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            raise FrontEndBuildError(
                f"`npm {' '.join(args)}` in {path}/ took over {NPM_TIMEOUT_S} s"
            ) from e
        if done.returncode != 0:
            raise FrontEndBuildError(
                f"`npm {' '.join(args)}` in {path}/ failed (exit {done.returncode}); "
                "its output is above"
            )
    for placeholder in keep:
        placeholder.touch()

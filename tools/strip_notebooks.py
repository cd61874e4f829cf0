"""Strip outputs, execution counts and widget state from notebooks before committing.

    python tools/strip_notebooks.py                 # every notebooks/*.ipynb
    python tools/strip_notebooks.py a.ipynb b.ipynb # just these
    python tools/strip_notebooks.py --check         # exit 1 if any would change

Standard library only; the JSON is written the way Jupyter writes it (1-space indent).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VOLATILE_METADATA = ("execution", "collapsed", "scrolled", "ExecuteTime")


def strip(nb: dict) -> dict:
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        meta = cell.get("metadata", {})
        for key in VOLATILE_METADATA:
            meta.pop(key, None)
    nb.get("metadata", {}).pop("widgets", None)
    return nb


def dumps(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if dirty")
    args = parser.parse_args(argv)
    paths = args.paths or sorted((ROOT / "notebooks").glob("*.ipynb"))
    dirty = []
    for path in paths:
        before = path.read_text(encoding="utf-8")
        after = dumps(strip(json.loads(before)))
        if after != before:
            dirty.append(path)
            if not args.check:
                path.write_text(after, encoding="utf-8")
    for path in dirty:
        print(f"{'would strip' if args.check else 'stripped'} {path}")
    return 1 if args.check and dirty else 0


if __name__ == "__main__":
    sys.exit(main())

"""The complexity budget of vlmprep/ (issue 27), run by `make lint`.

ruff's C901 (complexity > 10), PLR0912 (> 12 branches) and PLR0915 (> 50 statements), as set
in pyproject.toml, find the offenders; tools/complexity_baseline.txt lists the functions that
were over the budget when it was set, with their figures. This check fails on a new offender
or one that grew; a function that got back under the budget, or shrank, is reported so the
baseline can be tightened with `--update` (the baseline only ever shrinks by hand review).

    python tools/complexity.py            # check (exit 1 on a new or grown offender)
    python tools/complexity.py --update   # rewrite the baseline from the tree as it is
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASELINE = os.path.join(ROOT, "tools", "complexity_baseline.txt")
CODES = ("C901", "PLR0912", "PLR0915")
_FIGURE = re.compile(r"\((\d+) > \d+\)")


def _qualname(path: str, line: int, cache: dict[str, dict[int, str]]) -> str:
    """The dotted name (Class.method, outer.inner) of the function defined at ``line``."""
    if path not in cache:
        names: dict[int, str] = {}

        def walk(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    name = prefix + child.name
                    if not isinstance(child, ast.ClassDef):
                        names[child.lineno] = name
                    walk(child, name + ".")
                else:
                    walk(child, prefix)
        with open(path, encoding="utf-8") as f:
            walk(ast.parse(f.read()), "")
        cache[path] = names
    return cache[path].get(line, f"<line {line}>")


def findings() -> dict[str, int]:
    """``"CODE path::function" -> figure`` for every offender in vlmprep/."""
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ruff"), "check", "--select",
                          ",".join(CODES), "--output-format", "json", "--exit-zero", "vlmprep"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    cache: dict[str, dict[int, str]] = {}
    got: dict[str, int] = {}
    for f in json.loads(out):
        path = os.path.relpath(f["filename"], ROOT)
        m = _FIGURE.search(f["message"])
        if m is None:
            raise SystemExit(f"complexity: unexpected ruff message {f['message']!r}")
        key = f"{f['code']} {path}::{_qualname(f['filename'], f['location']['row'], cache)}"
        got[key] = max(got.get(key, 0), int(m.group(1)))
    return got


def read_baseline() -> dict[str, int]:
    base: dict[str, int] = {}
    with open(BASELINE, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                key, figure = line.rsplit(" ", 1)
                base[key] = int(figure)
    return base


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--update", action="store_true", help="rewrite the baseline from the tree")
    args = ap.parse_args()
    got = findings()
    if args.update:
        with open(BASELINE, "w", encoding="utf-8") as f:
            f.write("# Functions over the complexity budget (pyproject.toml) when it was set: they may stay,\n"
                    "# not grow. `python tools/complexity.py --update` rewrites this file.\n")
            for key in sorted(got):
                f.write(f"{key} {got[key]}\n")
        print(f"complexity: baseline written, {len(got)} offenders")
        return 0
    base = read_baseline()
    new = {k: v for k, v in got.items() if k not in base}
    grown = {k: (base[k], v) for k, v in got.items() if k in base and v > base[k]}
    better = sorted(k for k in base if got.get(k, 0) < base[k])
    for k, v in sorted(new.items()):
        print(f"complexity: new offender {k} ({v}): split it into named steps")
    for k, (was, now) in sorted(grown.items()):
        print(f"complexity: {k} grew {was} -> {now}: split it into named steps")
    if better:
        print(f"complexity: {len(better)} baseline entries improved or gone: run "
              f"`python tools/complexity.py --update` to tighten the baseline")
    print(f"complexity: {len(got)} offenders ({', '.join(f'{c} {sum(k.startswith(c) for k in got)}' for c in CODES)}), "
          f"baseline {len(base)}")
    return 1 if new or grown else 0


if __name__ == "__main__":
    sys.exit(main())

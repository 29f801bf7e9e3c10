"""``vlmprep`` command line. Every command takes ``--preset`` and ``--json``."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from . import bench as _bench
from . import info as _info
from . import plan as _plan


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vlmprep", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _plan.add_parser(sub)
    _info.add_parser(sub)
    _bench.add_parser(sub)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, KeyError, OSError) as e:
        print(f"vlmprep {args.command}: error: {e}", file=sys.stderr)
        return 2


def print_table(rows: list[dict], columns: Sequence[str]) -> None:
    """A plain aligned table on stdout."""
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def print_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    sys.exit(main())

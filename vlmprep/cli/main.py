"""``vlmprep`` command line. Every command takes ``--preset`` and ``--json``."""
from __future__ import annotations

import argparse
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


if __name__ == "__main__":
    sys.exit(main())

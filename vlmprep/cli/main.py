"""``vlmprep`` command line (also ``python -m vlmprep``). Every command takes ``--preset`` and
``--json``. Sizes on the command line and in its tables are width x height (``1920x1080``);
``--json`` gives sizes as ``[height, width]`` arrays under keys ending in ``_hw``, as in Python.

Exit status: 0 done; 1 some images failed (``plan``), or a job stopped early (``run``: bad images
alone never do; ``--resume`` continues); 2 a usage error (a flag, a file, a preset); 130 interrupted.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .. import __version__
from . import bench as _bench
from . import info as _info
from . import plan as _plan
from . import run as _run


def _version() -> str:
    return f"vlmprep {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vlmprep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True)
    _plan.add_parser(sub)
    _info.add_parser(sub)
    _bench.add_parser(sub)
    _run.add_parser(sub)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (ValueError, KeyError, OSError) as e:
        # KeyError's str() quotes its message; show it as written
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"vlmprep {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"vlmprep {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

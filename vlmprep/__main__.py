"""``python -m vlmprep``: the same command line as the ``vlmprep`` script."""
import sys

from .cli.main import main

if __name__ == "__main__":
    sys.exit(main())

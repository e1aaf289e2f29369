"""``python -m rcstat``: the command line (e.g. ``torchrun --nproc_per_node 2 -m rcstat heads``)."""

import sys

from rcstat.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""``python -m xtts_ft <command>``: single pipeline stages (see ``--help``)."""

import sys

from xtts_ft.cli import main

if __name__ == "__main__":
    sys.exit(main())

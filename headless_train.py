#!/usr/bin/env python
"""Fine-tune XTTS-v2 on a new language in one command.

    python headless_train.py --config configs/demo.yaml      # offline demo, CPU, minutes
    python headless_train.py --config configs/amharic.yaml   # a real run on a GPU

Everything happens in the xtts_ft package; this file only hands over the command line.
"""

import sys

from xtts_ft.cli import headless_main

if __name__ == "__main__":
    sys.exit(headless_main())

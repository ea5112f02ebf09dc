"""``python -m xtts_ft normalize``: its run function (the text package only: no torch, coqui or transformers).

Its options are in commands/arguments.py; cli.py imports this module only once it was chosen.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from xtts_ft.commands.common import command
from xtts_ft.text import normalize_text


@command()
def normalize(args: argparse.Namespace) -> int:
    dropped: Counter[str] = Counter()
    for line in sys.stdin:
        result = normalize_text(line.rstrip("\n"), fold_homophones=args.fold_homophones)
        dropped.update(result.dropped)
        sys.stdout.write(result.text + "\n")
    if dropped:
        summary = ", ".join(f"{ch!r} x{n}" for ch, n in dropped.most_common(10))
        print(f"dropped {sum(dropped.values())} characters: {summary}", file=sys.stderr)
    return 0

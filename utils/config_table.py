"""Write the configuration reference's table from the schema: ``python utils/config_table.py``.

Run it after adding or changing a config field (its default or help text in
xtts_ft/config/schema.py); tests/config/test_config_table.py fails until docs/configuration.md matches.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere: the package beside this folder
    sys.path.insert(0, str(REPO))

from xtts_ft.config.table import TABLE_DOC, update_table  # noqa: E402


def main() -> int:
    doc = REPO / TABLE_DOC
    changed = update_table(doc)
    print(f"{doc}: configuration table {'rewritten' if changed else 'already up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

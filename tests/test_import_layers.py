"""The knots #23 untied stay untied: read from the source (ast), nothing is imported or run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "xtts_ft"


def project_imports(path: Path) -> set[str]:
    """Every xtts_ft module a file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("xtts_ft")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("xtts_ft"):
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def files(pattern: str) -> list[Path]:
    return sorted(PACKAGE.glob(pattern))


# (files, module prefixes they must not import, why)
RULES = [
    ("data/*.py", ("xtts_ft.train", "xtts_ft.asr", "xtts_ft.evaluate"), "data sits below training, recognition, evaluation"),
    ("ingest/*.py", ("xtts_ft.train",), "ingest does not depend on training"),
    ("evaluate/synthesis.py", ("xtts_ft.train",), "synthesis does not depend on training"),
    ("text_settings.py", ("xtts_ft.tokenizer",), "the tokenizer is built from the settings, not the other way"),
    ("data/commonvoice.py", ("xtts_ft.data.readers",), "readers import commonvoice; both share data/entries.py"),
    ("text/*.py", ("xtts_ft.asr", "xtts_ft.data", "xtts_ft.config"), "text scoring and normalising is pure text work"),
]
FOUNDATION = {  # module -> the project modules it may import
    "languages.py": set(), "audio_io.py": set(), "input_hash.py": set(), "stop_signals.py": set(),
    "model_folder.py": {"xtts_ft.layout"}, "data/entries.py": {"xtts_ft.errors"},
}


@pytest.mark.parametrize("pattern,forbidden,why", RULES, ids=[r[0] for r in RULES])
def test_no_import_runs_back_up(pattern, forbidden, why):
    hits = [f"{p.relative_to(PACKAGE)} -> {m}" for p in files(pattern) for m in project_imports(p) if m.startswith(forbidden)]
    assert not hits, f"{why}: {hits}"


def test_foundation_modules_import_nothing_above_them():
    for name, allowed in FOUNDATION.items():
        imported = project_imports(PACKAGE / name)
        extra = {m for m in imported if not any(m == a or m.startswith(a + ".") for a in allowed)}
        assert not extra, f"{name} is a foundation module; it imports {sorted(extra)}"

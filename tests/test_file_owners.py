"""Each run file has one owner: the history files only through xtts_ft/run_history.py, every file name layout.py
defines spelt only there (utils/file_owners.py reads the source; nothing is imported)."""

from __future__ import annotations

from pathlib import Path

from utils import file_owners

REPO = Path(__file__).resolve().parents[1]


def test_the_package_keeps_one_owner_per_run_file() -> None:
    assert file_owners.problems(REPO) == [], "python utils/file_owners.py lists these"
    names = file_owners.layout_file_names(REPO)
    assert names["report.json"] == "STAGE_REPORT" and names["metrics.jsonl"] == "METRICS_FILE"
    assert "data" not in names  # folder names are words a module may well use for something else


def test_the_checker_finds_a_second_owner_and_a_second_definition(tmp_path: Path) -> None:
    pkg = tmp_path / "xtts_ft"
    (pkg / "webapp").mkdir(parents=True)
    (pkg / "asr").mkdir()
    files = {
        "layout.py": 'METRICS_FILE = "metrics.jsonl"\nSTAGE_REPORT = "report.json"\nDATA_DIR = "data"\n',
        "run_history.py": "from xtts_ft.layout import METRICS_FILE\n\nNAME = METRICS_FILE\n",  # the owner may
        "webapp/view.py": (
            '"""Reads report.json and metrics.jsonl."""\n'  # a docstring may name files
            "from xtts_ft.layout import METRICS_FILE, RunLayout\n\n\n"
            "def curves(run_dir):\n"
            "    layout = RunLayout(run_dir)\n"
            "    return open(layout.metrics), RunLayout(run_dir).samples_index, run_dir / 'own.jsonl'\n\n\n"
            "def report(folder):\n"
            "    return folder / 'report.json', folder / 'data', 'metrics.jsonl: 3 lines'\n"
        ),
        "asr/model_files.py": 'REQUIRED = ("vocab.json", "report.json")\n',  # vocab.json: listed in ELSEWHERE
    }
    (pkg / "layout.py").write_text(files["layout.py"] + 'VOCAB_FILE = "vocab.json"\n', encoding="utf-8")
    for name, text in files.items():
        if name != "layout.py":
            (pkg / name).write_text(text, encoding="utf-8")
    found = file_owners.problems(tmp_path)
    assert sorted(found) == sorted([
        "xtts_ft/asr/model_files.py:1 spells 'report.json', which xtts_ft/layout.py defines as STAGE_REPORT: import it",
        "xtts_ft/webapp/view.py:2 names METRICS_FILE: the history files belong to xtts_ft/run_history.py; use its "
        "readers and appenders",
        "xtts_ft/webapp/view.py:7 takes RunLayout(...).metrics: the history files belong to xtts_ft/run_history.py; "
        "use its readers and appenders",
        "xtts_ft/webapp/view.py:7 takes RunLayout(...).samples_index: the history files belong to "
        "xtts_ft/run_history.py; use its readers and appenders",
        "xtts_ft/webapp/view.py:7 spells the JSONL file 'own.jsonl': such files belong to xtts_ft/run_history.py",
        "xtts_ft/webapp/view.py:11 spells 'report.json', which xtts_ft/layout.py defines as STAGE_REPORT: import it",
    ])

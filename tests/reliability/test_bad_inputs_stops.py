"""Bad-input sweep, stops and resumes: what a user sees for each item of issue 22 this part fixed.

Command lines run in one process through scripts/cli_batch.py (the functions behind
``headless_train.py``), each with its exit code and its exact ``error:`` lines; the run-folder cases
are decided before any heavy work. A row whose data did *not* really change passes the run-folder
check and stops at the next stage (an empty base-model folder), which proves the check let it through
without training anything. Resuming from an older checkpoint runs in this process on the shared
trained run. Stops in every stage and a cut-short evaluation are in test_stop_stages.py and
test_resume_branches.py (they need whole runs).
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.fixtures.scripts import CLI_BATCH, script_command, script_env
from tests.reliability.relhelpers import REPO, copy_run, read_events, small_config
from xtts_ft.base_model import REQUIRED_FILES
from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.config import config_from_dict
from xtts_ft.layout import META_FILE
from xtts_ft.run_folder import RunRecord, run_fingerprint, write_record

pytestmark = pytest.mark.slow  # one process runs the sweep of bad inputs that stop a run

DEMO = REPO / "datasets" / "amharic_demo"
RUN_ID = "20260101-000000-cccccc"
H = "headless"


def folder_case(ws: Path, name: str, base: Path) -> Path:
    """``{name}.yaml`` and a run folder owned by RUN_ID (one checkpoint) made from the dataset ``{name}_data``."""
    rows = (DEMO / "metadata.csv").read_text(encoding="utf-8").splitlines()
    data = ws / f"{name}_data"
    (data / "wavs").mkdir(parents=True)
    for row in rows[1:5]:
        shutil.copyfile(DEMO / row.split("|")[0], data / row.split("|")[0])
    (data / "metadata.csv").write_text("\n".join(rows[:5]) + "\n", encoding="utf-8")
    (data / "ingest_report.json").write_text('{"seconds": 12.5}', encoding="utf-8")
    raw = {"run": {"output_dir": str(ws / name), "device": "cpu"}, "base_model": {"source": str(base)},
           "dataset": {"path": str(data), "format": "coqui"}, "precision": {"mode": "fp32"}}
    (ws / f"{name}.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    write_record(ws / name, RunRecord(run_id=RUN_ID, created="2026-01-01T00:00:00",
                                      fingerprint=run_fingerprint(config_from_dict(raw))))
    step = ws / name / "checkpoints" / "step_000004"
    step.mkdir(parents=True)
    (step / META_FILE).write_text(json.dumps({"step": 4, "run_id": RUN_ID}), encoding="utf-8")
    return data


def message_changed_data(ws: Path, name: str, changes: str) -> str:
    return (f"{ws}/{name}: holds run {RUN_ID} (1 checkpoint(s), latest step_000004) and this command would start "
            f"another run there: {changes}. Give the new run its own run.output_dir, or add --archive-old-run to "
            f"move run {RUN_ID} (checkpoints, samples, logs) into {ws}/{name}/old_runs/<date>_{RUN_ID}/ first "
            f"(nothing is deleted), or add --continue-with-new-data to continue run {RUN_ID} on the changed data "
            f"(its checkpoints and vocabulary kept)")


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    ws = tmp_path_factory.mktemp("stops_sweep")
    empty_base = ws / "empty_base"
    empty_base.mkdir()
    files = ", ".join(REQUIRED_FILES)
    lacks = f"base model folder '{empty_base}' lacks {files}; it needs the coqui/XTTS-v2 files ({files})"
    # the same ingest again: only its report's timing differs; a note beside the clips; neither is data
    data = folder_case(ws, "reingest", empty_base)
    (data / "ingest_report.json").write_text('{"seconds": 13.1}', encoding="utf-8")
    data = folder_case(ws, "notes", empty_base)
    (data / "notes.txt").write_text("recorded on Tuesday", encoding="utf-8")
    # data that really changed: a transcript edited
    data = folder_case(ws, "edited", empty_base)
    text = (data / "metadata.csv").read_text(encoding="utf-8").splitlines()
    first = text[1].split("|")
    text[1] = "|".join([first[0], first[1] + " ሰላም", *first[2:]])
    (data / "metadata.csv").write_text("\n".join(text) + "\n", encoding="utf-8")
    cases = [
        ("stops-reingest-report-only", ["--config", f"{ws}/reingest.yaml"], 2, [lacks]),
        ("stops-notes-beside-the-clips", ["--config", f"{ws}/notes.yaml"], 2, [lacks]),
        ("stops-data-changed", ["--config", f"{ws}/edited.yaml"], 2,
         [message_changed_data(ws, "edited", "the dataset's transcripts changed: 1 edited (metadata.csv)")]),
        ("stops-data-changed-continued", ["--config", f"{ws}/edited.yaml", "--continue-with-new-data"], 2, [lacks]),
        ("stops-continue-and-archive", ["--config", f"{ws}/notes.yaml", "--continue-with-new-data",
                                        "--archive-old-run"], 2,
         ["--continue-with-new-data and --archive-old-run: choose one (continue the run on the new data, or move it "
          "aside and start a new one)"]),
        ("stops-continue-when-evaluating", ["--config", f"{ws}/notes.yaml", "--evaluate", "--continue-with-new-data"],
         2, ["--continue-with-new-data: only used when training; --evaluate trains nothing"]),
    ]
    (ws / "cases.json").write_text(json.dumps([{"id": c[0], "command": H, "argv": c[1]} for c in cases]),
                                   encoding="utf-8")
    done = subprocess.run(script_command(CLI_BATCH, ws / "cases.json", ws / "results.json"),
                          cwd=REPO, env=script_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    results = {r["id"]: r for r in json.loads((ws / "results.json").read_text(encoding="utf-8"))}
    return ws, cases, results


CASE_IDS = ["stops-reingest-report-only", "stops-notes-beside-the-clips", "stops-data-changed",
            "stops-data-changed-continued", "stops-continue-and-archive", "stops-continue-when-evaluating"]


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_bad_input_gives_the_exact_message_and_no_traceback(sweep, case_id):
    _ws, cases, results = sweep
    (_, _, rc, expected), result = next(c for c in cases if c[0] == case_id), results[case_id]
    assert "Traceback" not in result["stderr"], result["stderr"][-3000:]
    lines = [line.split("error: ", 1)[1] for line in result["stderr"].splitlines() if line.startswith("error: ")]
    assert lines == expected, result["stderr"][-3000:]
    assert result["rc"] == rc


def test_continuing_on_changed_data_keeps_the_run_and_records_the_change(sweep):
    ws, _, _ = sweep
    run = ws / "edited"
    assert json.loads((run / "run.json").read_text(encoding="utf-8"))["run_id"] == RUN_ID
    assert not (run / "old_runs").exists() and (run / "checkpoints" / "step_000004").is_dir()
    (event,) = [e for e in read_events(run) if e["event"] == "data_changed"]
    assert event["changes"] == ["the dataset's transcripts changed: 1 edited (metadata.csv)"]


def test_resume_from_an_older_checkpoint_says_where_the_later_ones_went(trained_run, trainer, tmp_path, caplog):
    run = copy_run(trained_run, tmp_path / "run")  # checkpoints at steps 2 and 4
    older = run / "checkpoints" / "step_000002"
    cfg = small_config(run, training={"max_steps": 2}, checkpoint={"every_steps": 2, "keep_last": 3,
                                                                    "resume": str(older)})
    with caplog.at_level(logging.WARNING, logger="xtts_ft.train.branch"):
        result = trainer(cfg)  # step 2 reaches max_steps: nothing is trained, the branch is still set aside
    assert result.step == 2
    (branch,) = (run / "branches").iterdir()
    assert (branch / "checkpoints" / "step_000004").is_dir() and CheckpointStore.verify(
        branch / "checkpoints" / "step_000004")
    assert (f"resume from step 2 while this run has later checkpoints (4): they are kept, moved with their samples "
            f"to {branch}; training continues from step 2 as a new branch") in caplog.text

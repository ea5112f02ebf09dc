"""The run's history files (metrics.jsonl, events.jsonl, samples/index.jsonl) through their one owner.

Each record type round-trips; a line cut short by a kill is skipped and counted; a truncation keeps the lines up
to a step as they were written; and lines in the format the code before run_history wrote still read.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from xtts_ft import run_history
from xtts_ft.layout import RunLayout
from xtts_ft.run_history import EvalRecord, Event, MetricsRow

SAMPLE = {"name": "s0_spk", "index": 0, "speaker": "spk", "text": "ሰላም", "path": "samples/step_000002/s0_spk.wav",
          "reference_wav": "/voices/spk.wav", "cer": 0.25, "ended_with_stop": True}


def _evaluation(step: int, **metrics: float) -> EvalRecord:
    return EvalRecord(step=step, time="2026-11-27T10:00:00", dir=f"samples/step_{step:06d}", samples=(SAMPLE,),
                      mcd_samples=(), language_samples={"en": (dict(SAMPLE, name="en_0"),)},
                      metrics={"sample_cer": 0.25, **metrics}, seconds_per_char_range=(0.05, 0.2), eval_seconds=1.5)


def test_each_record_type_round_trips_through_its_file(tmp_path: Path) -> None:
    rows = [MetricsRow(step=1, fields={"loss": 2.5, "lr": 1e-4, "time": 10.0}),
            MetricsRow(step=2, split="eval", fields={"eval_loss": 1.75, "time": 11.0})]
    events = [Event(event="resume", step=2, fields={"checkpoint": "c/step_000002"}, time=12.0),
              Event(event="data_changed", step=None, fields={"changes": ["hours"]}, time=13.0)]
    evaluation = _evaluation(2)
    with run_history.open_metrics(tmp_path) as appender:
        for row in rows:
            appender.append(row)
    with run_history.open_events(tmp_path) as appender:
        for event in events:
            appender.append(event)
    run_history.append_evaluation(tmp_path, evaluation)  # creates samples/

    assert list(run_history.read_metrics(tmp_path)) == rows
    assert list(run_history.read_events(tmp_path)) == events
    assert list(run_history.read_evaluations(tmp_path)) == [evaluation]
    # the typed fields, and the line as written (a row's metric names are open-ended)
    train, ev = run_history.read_metrics(tmp_path)
    assert (train.step, train.split, train["loss"], "split" in train) == (1, "train", 2.5, False)
    assert list(train.values()) == [1, 2.5, 1e-4, 10.0]  # a full mapping: keys, values and items in written order
    assert (train.number("lr"), train.number("absent"), MetricsRow(step=3, fields={"loss": None}).number("loss")) == (
        1e-4, None, None)
    assert ev.is_eval and ev.get("eval_loss") == 1.75 and dict(ev) == {"step": 2, "split": "eval", "eval_loss": 1.75,
                                                                        "time": 11.0}
    read = run_history.read_evaluations(tmp_path).records[0]
    assert read.samples[0]["text"] == "ሰላም" and read.language_samples["en"][0]["name"] == "en_0"
    assert read.seconds_per_char_range == (0.05, 0.2)
    # one JSON object a line, at the layout's places
    lines = RunLayout(tmp_path).events.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[1]) == {"step": None, "event": "data_changed", "changes": ["hours"], "time": 13.0}


def test_non_finite_numbers_are_written_as_null_so_every_line_stays_json(tmp_path: Path) -> None:
    run_history.append_evaluation(tmp_path, _evaluation(4, mcd=math.nan))
    with run_history.open_metrics(tmp_path) as appender:
        appender.append(MetricsRow(step=4, fields={"loss": math.inf, "grad_norm": 0.5}))
    line = json.loads(RunLayout(tmp_path).samples_index.read_text(encoding="utf-8"))  # strict: no NaN token
    assert line["metrics"]["mcd"] is None
    assert run_history.read_metrics(tmp_path).records[0]["loss"] is None


def test_a_line_cut_short_by_a_kill_is_skipped_and_counted(tmp_path: Path) -> None:
    with run_history.open_metrics(tmp_path) as appender:
        appender.append(MetricsRow(step=1, fields={"loss": 2.0}))
        appender.append(MetricsRow(step=2, fields={"loss": 1.9}))
    path = RunLayout(tmp_path).metrics
    with path.open("a", encoding="utf-8") as f:
        f.write('\n["not", "a", "row"]\n{"no_step": 1}\n{"step": 3, "lo')  # a blank line, two strays, a cut line
    history = run_history.read_metrics(tmp_path)
    assert [r.step for r in history] == [1, 2]
    assert history.skipped == (4, 5, 6)  # 1-based line numbers; the blank line is neither a record nor an error
    assert run_history.read_events(tmp_path).records == ()  # an absent file reads as empty


def test_truncation_keeps_the_lines_up_to_the_step_as_written(tmp_path: Path) -> None:
    path = RunLayout(tmp_path).samples_index
    path.parent.mkdir(parents=True)
    written = [json.dumps({"step": s, "metrics": {"sample_cer": s / 10}}, indent=None) for s in (2, 4, 6)]
    path.write_text("\n".join(written) + '\n{"step": 2, "me', encoding="utf-8")  # the last one cut by a kill
    assert run_history.truncate_evaluations(tmp_path, 4) == 2  # step 6 and the cut line
    assert path.read_text(encoding="utf-8") == written[0] + "\n" + written[1] + "\n"  # byte for byte
    assert run_history.truncate_evaluations(tmp_path, 4) == 0  # nothing more to drop: the file is left alone

    with run_history.open_metrics(tmp_path) as appender:
        for step in (1, 2, 3):
            appender.append(MetricsRow(step=step, fields={"loss": 1.0}))
        appender.append(MetricsRow(step=3, split="eval", fields={"eval_loss": 1.0}))
    assert run_history.truncate_metrics(tmp_path, 2) == 2
    assert [(r.step, r.split) for r in run_history.read_metrics(tmp_path)] == [(1, "train"), (2, "train")]
    assert run_history.truncate_metrics(tmp_path / "absent", 2) == 0


def test_the_format_the_code_before_run_history_wrote_still_reads(tmp_path: Path) -> None:
    """Lines exactly as train/metrics.py, train/stopping.py and evaluate/hook.py wrote them before (and older
    evaluation lines with only a step and metrics, as tests and early runs have)."""
    layout = RunLayout(tmp_path)
    layout.samples.mkdir(parents=True)
    layout.metrics.write_text(
        '{"step": 10, "epoch": 0, "epochs": 0.5, "audio_hours": null, "loss": 3.1, "loss_text_ce": 4.0, '
        '"loss_mel_ce": 3.0, "lr": 5e-06, "grad_norm": 1.2, "loss_scale": 1.0, "skipped_steps": 0, '
        '"precision": "fp32", "samples_per_s": 4.0, "eta_s": 100.0, "time": 1764237600.5}\n'
        '{"step": 10, "split": "eval", "eval_loss": 2.9, "sample_cer": 0.4, "time": 1764237601.0}\n', encoding="utf-8")
    layout.events.write_text(
        '{"step": 10, "event": "checkpoint", "path": "/r/checkpoints/step_000010", "time": 1764237602.0}\n'
        '{"step": null, "event": "data_changed", "changes": ["3 clips added"], "time": 1764237603.0}\n'
        '{"step": 0, "event": "stop", "signal": "SIGINT", "during": "prepare", "checkpoint": null, '
        '"resume_command": "python headless_train.py --config c.yaml", "time": 1764237604.0}\n', encoding="utf-8")
    old_hook_line = {"step": 10, "time": "2026-11-27T10:00:00", "dir": "samples/step_000010", "samples": [SAMPLE],
                     "mcd_samples": [], "language_samples": {}, "metrics": {"sample_cer": 0.4, "mcd": None},
                     "seconds_per_char_range": [0.05, 0.2], "eval_seconds": 2.0}
    layout.samples_index.write_text(json.dumps(old_hook_line, ensure_ascii=False) + "\n"
                                    + json.dumps({"step": 20, "metrics": {"sample_cer": 0.3}}) + "\n", encoding="utf-8")

    train, ev = run_history.read_metrics(tmp_path)
    assert (train.step, train["lr"], train["precision"], ev.split, ev["eval_loss"]) == (10, 5e-06, "fp32", "eval", 2.9)
    checkpoint, changed, stop = run_history.read_events(tmp_path)
    assert (checkpoint.event, checkpoint.step, checkpoint["path"], checkpoint.time) == (
        "checkpoint", 10, "/r/checkpoints/step_000010", 1764237602.0)
    assert changed.step is None and changed.fields == {"changes": ["3 clips added"]}
    assert stop.get("resume_command") == "python headless_train.py --config c.yaml" and stop["checkpoint"] is None
    full, short = run_history.read_evaluations(tmp_path)
    assert full.to_json() == old_hook_line  # the hook's line reads back to the same JSON
    assert (short.step, short.metrics, short.samples, short.seconds_per_char_range) == (20, {"sample_cer": 0.3}, (),
                                                                                         None)


def test_latest_by_step_keeps_the_last_record_of_a_step_written_twice(tmp_path: Path) -> None:
    for record in (_evaluation(4, mcd=1.0), _evaluation(2), _evaluation(4, mcd=2.0)):  # a resumed run evaluated 4 again
        run_history.append_evaluation(tmp_path, record)
    latest = run_history.latest_by_step(run_history.read_evaluations(tmp_path))
    assert list(latest) == [2, 4] and latest[4].metrics["mcd"] == 2.0


def test_a_branch_copy_holds_the_history_as_it_was(tmp_path: Path) -> None:
    run, branch = tmp_path / "run", tmp_path / "run" / "branches" / "b"
    with run_history.open_metrics(run) as appender:
        appender.append(MetricsRow(step=1, fields={"loss": 1.0}))
    run_history.append_evaluation(run, _evaluation(2))
    run_history.copy_history(run, branch)
    assert RunLayout(branch).metrics.read_bytes() == RunLayout(run).metrics.read_bytes()
    assert list(run_history.read_evaluations(branch)) == [_evaluation(2)]
    assert not RunLayout(branch).events.exists()  # events stay with the run: they keep its whole history

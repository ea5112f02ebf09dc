import re
import shutil
from pathlib import Path
from urllib.parse import unquote

from tests.evaluate.evalhelpers import write_fake_run
from xtts_ft.evaluate.report import write_report


def test_report_is_one_self_contained_page(tmp_path):
    run_dir = tmp_path / "run"
    n = write_fake_run(run_dir)
    path = write_report(run_dir)
    assert path == run_dir / "report.html"
    html = path.read_text(encoding="utf-8")
    assert html.count("<audio") == n == 12
    assert html.count('<img alt="') >= 8 and '<img alt="Loss" src="data:image/png;base64,' in html
    assert "http" not in html.lower()  # no CDN, no web fonts, no remote anything
    for link in re.findall(r'(?:src|href)="([^"]*)"', html):
        assert link.startswith("data:image/png;base64,") or not re.match(r"^([a-z][a-z0-9+.-]*:|//|/)", link), link
    # every audio src is relative and exists, so the page works wherever the run dir is copied
    srcs = re.findall(r'<audio controls preload="metadata" src="([^"]+)"', html)
    assert len(srcs) == n and all(not s.startswith("/") for s in srcs)
    copy = shutil.copytree(run_dir, tmp_path / "copied")
    assert all((Path(copy) / unquote(s)).is_file() for s in srcs)


def test_report_checkpoint_table_marks_the_best_steps(tmp_path):
    run_dir = tmp_path / "run"
    write_fake_run(run_dir)
    html = write_report(run_dir).read_text(encoding="utf-8")
    table = html.split("<h2>Pick a checkpoint</h2>")[1].split("<h2>")[0]
    assert '<a href="checkpoints/step_000400/">' in table and '<a href="checkpoints/step_000600/">' in table
    assert "checkpoints/step_000200" not in table  # no folder for that step
    assert "600 (lowest eval loss, lowest MCD)" in table
    assert "Skipped unreadable lines: 1 in metrics.jsonl" in html


def test_report_of_an_empty_run_dir(tmp_path):
    html = write_report(tmp_path).read_text(encoding="utf-8")
    assert "No evaluations or checkpoints yet" in html and "<audio" not in html


def test_report_with_only_training_lines(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n{"step": 2}\n\n', encoding="utf-8")
    html = write_report(tmp_path).read_text(encoding="utf-8")
    assert '<img alt="Loss"' in html and '<img alt="Learning rate"' not in html

"""Documentation as a test: the report renders in a real browser (plots and audio players).

Runs only where a Chromium binary exists (``apt-get install -y chromium``); the main report
test does not depend on it.
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.evaluate.evalhelpers import write_fake_run
from xtts_ft.evaluate.report import write_report

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "utils" / "screenshot_report.py"


def _find_chromium():
    spec = importlib.util.spec_from_file_location("screenshot_report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.find_chromium()


@pytest.mark.skipif(_find_chromium() is None, reason="needs the optional chromium binary (apt-get install -y chromium)")
def test_report_screenshot_shows_plots_and_players(tmp_path):
    from PIL import Image

    run_dir = tmp_path / "run"
    write_fake_run(run_dir)
    report = write_report(run_dir)
    out = tmp_path / "report.png"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(report), str(out)],
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    image = np.asarray(Image.open(out).convert("RGB"))
    assert image.shape == (2000, 1280, 3)
    # not a blank page: plots draw coloured lines (matplotlib's default blue) on white
    blue = np.all(np.abs(image.astype(int) - [31, 119, 180]) < 30, axis=-1)
    assert blue.sum() > 500

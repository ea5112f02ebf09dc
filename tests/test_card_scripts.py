"""The scripts a lent card runs first, checked here where no card is: the wheels folder's set-up under the card image's
torch (faked: a version >= 2.9 and no torchcodec), and benchmarks/card_quick.sh as its CPU rehearsal, whole and
stopped part-way."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.fixtures.benchmarks import load_benchmark

pytestmark = pytest.mark.slow  # each test starts the project's Python processes (torch, coqui) several times
QUICK = REPO_ROOT / "benchmarks" / "card_quick.sh"
FIGURES = ("first_audio_p50_1", "first_audio_p95_32", "x_realtime_32", "train_peak_share")


def _fake_torch_2_11(folder: Path) -> Path:
    """A folder that, first on PYTHONPATH, makes torch's distribution say 2.11.0 to coqui-tts (it reads the version
    through importlib.metadata), as on the GPU machines' image. Only to coqui: transformers reads the same metadata and
    would then use torch 2.11's functions, which the torch installed here lacks."""
    folder.mkdir(parents=True)
    (folder / "sitecustomize.py").write_text(
        "import importlib.metadata\nimport sys\n\n_version = importlib.metadata.version\n\n\n"
        "def version(name):\n"
        "    if name == 'torch' and sys._getframe(1).f_globals.get('__name__', '').startswith('TTS'):\n"
        "        return '2.11.0'\n"
        "    return _version(name)\n\n\n"
        "importlib.metadata.version = version\n", encoding="utf-8")
    return folder


def _wheel(folder: Path) -> Path:
    """The smallest wheel pip installs offline: one empty package."""
    path = folder / "card_probe-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("card_probe/__init__.py", "")
        whl.writestr("card_probe-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: card-probe\nVersion: 0.1\n")
        whl.writestr("card_probe-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
                                                       "Tag: py3-none-any\n")
        whl.writestr("card_probe-0.1.dist-info/RECORD", "")
    return path


def test_the_wheels_setup_makes_coqui_import_under_torch_2_9_without_torchcodec_and_decodes_the_voice(tmp_path):
    """What gpu_wheels.sh puts in its folder as setup.sh, sourced where torch says 2.11 and no torchcodec exists:
    coqui-tts refuses to import there on its own (checked first, so the fake is known to reach coqui's check); after the
    set-up it imports, the serving engine imports, the demo voice decodes, and the last line says so."""
    fake = _fake_torch_2_11(tmp_path / "image")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "setup.sh").write_text((REPO_ROOT / "benchmarks" / "card_setup.sh").read_text(encoding="utf-8"))
    _wheel(wheels)
    site = tmp_path / "site"
    env = {**os.environ, "PYTHONPATH": str(fake), "CARD_SITE": str(site)}
    python = Path(sys.executable).parent  # the card's python3: this environment's
    env["PATH"] = f"{python}:{env['PATH']}"
    refused = subprocess.run(["python3", "-c", "import TTS"], env=env, capture_output=True, text=True, cwd=REPO_ROOT)
    assert refused.returncode != 0 and "torchcodec" in refused.stderr.lower(), refused.stderr[-2000:]
    done = subprocess.run(["bash", "-c", f"source {wheels}/setup.sh && python3 -c 'import TTS, card_probe'"],
                          env=env, capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(rf"card ready: torch \S+, CUDA .*; coqui-tts \S+ \(it wanted torchcodec: a placeholder in "
                        rf"{re.escape(str(site))}\); serving engine imported; voice clip decoded \(3\.31 s\)", last), \
        done.stdout[-2000:]
    placeholder = subprocess.run(["python3", "-c", "import torchcodec"], env={**env, "PYTHONPATH": str(site)},
                                 capture_output=True, text=True)
    assert placeholder.returncode != 0 and "placeholder" in placeholder.stderr  # nothing can use it by mistake


def test_a_broken_setup_stops_with_one_line_naming_the_step(tmp_path, monkeypatch, capsys):
    """No wheels to install: setup.sh's one line and status 1. A voice clip that does not decode: card_env's one line
    names the step (the check's steps run in this process: torch and coqui are loaded already)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "setup.sh").write_text((REPO_ROOT / "benchmarks" / "card_setup.sh").read_text(encoding="utf-8"))
    env = {**os.environ, "CARD_SITE": str(tmp_path / "site"),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", f"source {wheels}/setup.sh; echo status $?"], env=env, capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=120)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"card set-up FAILED at installing the wheels of {wheels}: "), lines
    assert lines[1] == "status 1"
    card_env = load_benchmark("card_env")
    not_audio = REPO_ROOT / "datasets" / "amharic_demo" / "wavs" / "not_audio.flac"
    monkeypatch.setattr(card_env, "VOICE", not_audio)
    monkeypatch.setattr(card_env, "place_codec_placeholder", lambda site: "torch (stand-in)")
    with pytest.raises(SystemExit) as stop:
        card_env.main([str(tmp_path / "site")])
    assert re.fullmatch(r"card set-up FAILED at decoding the demo voice datasets/amharic_demo/wavs/not_audio\.flac: "
                        r"DecodeError: [^\n]+", str(stop.value)), stop.value
    assert capsys.readouterr().out == ""


def _in_out(out: Path) -> list[Path]:
    files = [p for p in out.rglob("*") if p.is_file()]
    assert all(len(p.relative_to(out).parts) <= 2 for p in files), files  # OUT/file or OUT/x/file: what comes back
    return files


def test_the_card_quick_rehearsal_runs_every_step_and_ends_with_the_four_figures(tmp_path):
    """CARD_REHEARSAL=cpu: the tiny model's engine (a lone caller, then 32) and training step
    on the CPU, then the figure lines; a share of a card's peak means nothing here (n/a). All it printed is in OUT,
    with the rows and the figures, in at most 8 files, none deeper than OUT/x/file."""
    out = tmp_path / "OUT"
    out.mkdir()  # the device's OUT: an empty folder that exists
    done = subprocess.run(["bash", str(QUICK), str(out)], env={**os.environ, "CARD_REHEARSAL": "cpu"}, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    lines = done.stdout.splitlines()
    figures = lines[-4:]
    assert [line.split()[0] for line in figures] == list(FIGURES), done.stdout[-3000:]
    number = r"\d+(\.\d+)?"
    assert re.fullmatch(rf"first_audio_p50_1 {number} ms", figures[0]) and re.fullmatch(rf"first_audio_p95_32 {number} ms",
                                                                                           figures[1])
    assert re.fullmatch(rf"x_realtime_32 {number} x", figures[2]) and figures[3] == "train_peak_share n/a %"
    assert re.search(r"^### 01-engine: exit 0$", done.stdout, re.M) and re.search(r"^### 02-train: exit 0$", done.stdout, re.M)
    assert re.search(r"engine x32 +first audio", done.stdout) and "bf16 b2" in done.stdout
    files = _in_out(out)
    assert sorted(p.name for p in files) == ["card_quick.txt", "engine.json", "summary.txt", "train.json"]
    assert (out / "card_quick.txt").read_text(encoding="utf-8") == done.stdout
    assert (out / "summary.txt").read_text(encoding="utf-8").splitlines() == figures
    again = subprocess.run(["bash", str(QUICK), str(out)], capture_output=True, text=True, cwd=REPO_ROOT)
    assert again.returncode == 2 and "holds files already" in again.stderr  # earlier results are never written over


def _session_processes(session: int) -> list[str]:
    """The command lines of the processes still running in ``session`` (a stopped script must leave none; an ended one
    its parent has not reaped yet, a zombie, is not running)."""
    left = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # state, parent, group, session, ...
            if int(fields[3]) == session and fields[0] != "Z":
                left.append((stat.parent / "cmdline").read_text().replace("\0", " "))
        except (OSError, IndexError, ValueError):
            continue  # ended while being read
    return left


def test_a_stop_at_a_random_moment_leaves_what_was_printed_in_out_and_nothing_running(tmp_path):
    """SIGTERM to the whole process group (as a caller's time limit sends it) a random moment into the rehearsal: the
    running step ends at once with its benchmark's child processes, the script says it stopped and exits 143, and
    OUT's transcript holds exactly the lines printed."""
    moment = random.Random().uniform(0.5, 4.0)
    out = tmp_path / "OUT"
    script = subprocess.Popen(["bash", str(QUICK), str(out)], env={**os.environ, "CARD_REHEARSAL": "cpu"}, cwd=REPO_ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert script.stdout is not None
    first = script.stdout.readline()  # the script has started its steps
    time.sleep(moment)
    os.killpg(script.pid, signal.SIGTERM)
    printed = first + script.stdout.read()  # to the end: the transcript's tee ends when the last writer has
    assert script.wait(timeout=60) == 143, (moment, printed[-2000:])
    deadline = time.monotonic() + 10
    while _session_processes(script.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _session_processes(script.pid) == [], moment
    assert printed.rstrip().splitlines()[-1].startswith("### stopped by a signal"), (moment, printed[-2000:])
    _in_out(out)
    assert (out / "card_quick.txt").read_text(encoding="utf-8") == printed, moment

"""Bad-input sweep, part two (issue 22): writes that would lose what a user has, and messages that named the wrong thing.

One case per item: each command that writes a folder refuses one it did not write (and changes nothing
in it), in one line naming the folder, what is there and the option; and each message the issue found
wrong now names the right thing. Commands run in-process through the same ``main`` as
``python -m xtts_ft``; none of these cases loads a model, so the file runs in seconds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from tests.reliability.relhelpers import REPO
from xtts_ft.asr import SMALL_MODEL_DIR
from xtts_ft.cli import main
from xtts_ft.config import Config, with_changes
from xtts_ft.errors import DiskSpaceError
from xtts_ft.ingest.subtitles import read_cues
from xtts_ft.train.disk_budget import DiskEstimate, check_disk_budget

DEMO = REPO / "datasets" / "amharic_demo"


def run(capsys, argv: list[str]) -> tuple[int, list[str]]:
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, [line[len("error: "):] for line in err.splitlines() if line.startswith("error: ")]


def digest(folder) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def wav(path, seconds: float) -> None:
    sf.write(str(path), np.zeros(int(seconds * 22050), np.float32), 22050, subtype="PCM_16")


@pytest.fixture
def user_model(tmp_path):
    """A folder holding the user's own (not tool-written) model files."""
    folder = tmp_path / "my_model"
    folder.mkdir()
    (folder / "model.pth").write_bytes(b"the user's fine-tuned weights")
    (folder / "config.json").write_text("{}", encoding="utf-8")
    return folder


# --- folders a command did not write ------------------------------------------------------------


def test_ingest_into_a_dataset_it_did_not_write_is_refused(tmp_path, capsys):
    ds = shutil.copytree(DEMO, tmp_path / "demo")
    before = digest(ds)
    wav(tmp_path / "take2.wav", 2.0)
    code, lines = run(capsys, ["ingest", str(tmp_path / "take2.wav"), "--out", str(ds)])
    count = len(before)
    assert code == 2 and lines == [
        f"--out {ds}: holds {count} file(s) not written by this tool: README.md, extra_text.txt, "
        f"metadata.csv and {count - 3} more; choose another --out, or pass --add-to-existing to add the new clips to it, or "
        f"--move-old-aside to move it to demo.old-<date> and write a new one"]
    assert digest(ds) == before


def test_make_random_model_never_replaces_a_model_it_did_not_write(user_model, capsys):
    before = digest(user_model)
    code, lines = run(capsys, ["make-random-model", "--out", str(user_model)])
    assert code == 2 and lines == [
        f"--out {user_model}: holds 2 file(s) not written by this tool: config.json, model.pth; choose another --out, "
        f"or pass --move-old-aside to move it to my_model.old-<date> and write a new one"]
    assert digest(user_model) == before


def test_export_never_replaces_a_model_it_did_not_write(user_model, tmp_path, capsys):
    before = digest(user_model)
    (tmp_path / "ckpt").mkdir()
    code, lines = run(capsys, ["export", "--checkpoint", str(tmp_path / "ckpt"), "--out", str(user_model)])
    assert code == 2 and lines == [
        f"--out {user_model}: holds 2 file(s) not written by this tool: config.json, model.pth; choose another --out, "
        f"or pass --move-old-aside to move it to my_model.old-<date> and write a new one"]
    assert digest(user_model) == before


def test_prepare_into_a_folder_it_did_not_write_is_refused(user_model, capsys):
    before = digest(user_model)
    code, lines = run(capsys, ["prepare", "--input", str(DEMO), "--out", str(user_model)])
    assert code == 2 and lines[0].startswith(f"--out {user_model}: holds 2 file(s) not written by this tool")
    assert digest(user_model) == before


# --- messages that named the wrong thing ---------------------------------------------------------


def test_export_of_a_folder_of_checkpoints_names_the_step_folders(tmp_path, capsys):
    checkpoints = tmp_path / "run" / "checkpoints"
    for step in ("step_000002", "step_000004", "step_000006"):
        (checkpoints / step).mkdir(parents=True)
    code, lines = run(capsys, ["export", "--checkpoint", str(checkpoints), "--out", str(tmp_path / "export")])
    assert code == 2 and lines == [
        f"--checkpoint {checkpoints}: holds checkpoints, it is not one (step_000002, step_000004, step_000006); pass "
        f"one of them, e.g. --checkpoint {checkpoints / 'step_000006'}"]
    assert not (tmp_path / "export").exists()


@pytest.mark.parametrize("seconds, what", [(0.0, "no audio in it"), (0.01, "only 10 ms of audio")])
def test_transcribe_of_an_empty_or_10_ms_wav_is_one_line(tmp_path, capsys, seconds, what):
    config = tmp_path / "asr.yaml"
    config.write_text(f"dataset: {{path: {DEMO}}}\nasr: {{model: '{SMALL_MODEL_DIR}', device: cpu}}\n", encoding="utf-8")
    wav(tmp_path / "short.wav", seconds)
    code, lines = run(capsys, ["transcribe", "--config", str(config), str(tmp_path / "short.wav")])
    assert code == 2 and lines == [f"{tmp_path / 'short.wav'}: {what}; the recogniser needs at least 0.1 s of speech"]


def test_transcribe_of_a_folder_names_what_it_expects_when_it_holds_no_audio(tmp_path, capsys):
    from xtts_ft.asr.command import audio_files

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x", encoding="utf-8")
    config = tmp_path / "asr.yaml"
    config.write_text(f"dataset: {{path: {DEMO}}}\n", encoding="utf-8")
    code, lines = run(capsys, ["transcribe", "--config", str(config), str(tmp_path / "notes")])
    assert code == 2 and lines == [f"{tmp_path / 'notes'}: a folder with no audio files (.wav, .flac, .mp3, .ogg) "
                                   f"directly in it; give audio files, or a folder that holds them"]
    assert audio_files([str(DEMO / "wavs")])[:2] == [str(DEMO / "wavs" / "spk1_001.flac"),
                                                     str(DEMO / "wavs" / "spk1_002.flac")]


def test_a_corrupt_mp3_in_a_common_voice_folder_says_cannot_decode_with_the_real_reason(tmp_path):
    from xtts_ft.data import prepare_command
    from xtts_ft.text_settings import make_normalizer

    cv = tmp_path / "cv"
    (cv / "clips").mkdir(parents=True)
    (cv / "clips" / "broken.mp3").write_bytes(bytes(np.random.default_rng(0).integers(0, 256, 3000, dtype=np.uint8)))
    shutil.copyfile(DEMO / "wavs" / "spk1_001.flac", cv / "clips" / "good.flac")
    (cv / "validated.tsv").write_text("client_id\tpath\tsentence\nc1\tbroken.mp3\tሰላም ለሁሉም።\n"
                                      "c1\tgood.flac\tዛሬ ጠዋት ቡና ጠጥቼ ወደ ሥራ ሄድኩ።\n", encoding="utf-8")
    normalizer = make_normalizer(fold_homophones=True)
    prepare_command(cv, tmp_path / "out", "commonvoice", normalizer=normalizer, eval_fraction=0.0, num_workers=1,
                    progress=False)
    rows = (tmp_path / "out" / "rejected.tsv").read_text(encoding="utf-8").splitlines()[1:]
    broken = [row.split("\t") for row in rows if "broken.mp3" in row]
    assert len(broken) == 1 and broken[0][1] == "unreadable", rows
    detail = broken[0][3]
    assert detail.startswith("cannot decode (") and "does not exist" not in detail, detail
    if shutil.which("ffmpeg"):  # the real reason is the decoder's own
        assert "Failed to read frame size" in detail, detail


def test_mpg123_resync_notes_never_reach_the_console(tmp_path, capfd):
    if "MP3" not in sf.available_formats():
        pytest.skip("libsndfile here cannot read MP3: pip install 'soundfile>=0.12' (bundles libsndfile 1.1+)")
    from xtts_ft.audio_io import DecodeError, decode

    t = np.arange(44100) / 22050
    sf.write(str(tmp_path / "ok.mp3"), (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 22050, format="MP3")
    data = (tmp_path / "ok.mp3").read_bytes()
    noise = bytes(np.random.default_rng(1).integers(0, 256, 2000, dtype=np.uint8))
    (tmp_path / "damaged.mp3").write_bytes(data[:600] + noise + data[600:])
    capfd.readouterr()
    if shutil.which("ffmpeg") is None:  # libsndfile gives up on this damage; ffmpeg would decode the rest
        with pytest.raises(DecodeError, match="ffmpeg is not installed"):
            decode(str(tmp_path / "damaged.mp3"))
    else:
        samples, _, _ = decode(str(tmp_path / "damaged.mp3"))
        assert len(samples) > 22050
    out, err = capfd.readouterr()
    assert "resync" not in (out + err).lower(), err  # mpg123's notes go to the debug log either way


def test_a_dataset_index_past_the_list_says_out_of_range(tmp_path, capsys):
    config = tmp_path / "three.yaml"
    config.write_text("dataset:\n" + "".join(f"  - {{path: {DEMO}, language: am}}\n" for _ in range(3)),
                      encoding="utf-8")
    code, lines = run(capsys, ["train", "--config", str(config), "--set", "dataset.5.path="])
    assert code == 2 and lines == ["--set dataset.5.path=: dataset 5 is out of range: this config lists 3 datasets, "
                                   "numbered 0-2"]


def test_a_key_given_twice_is_refused(tmp_path, capsys):
    config = tmp_path / "one.yaml"
    config.write_text(f"dataset: {{path: {DEMO}}}\n", encoding="utf-8")
    code, lines = run(capsys, ["train", "--config", str(config), "--set", "training.lr=1e-4", "--set", "training.lr=2e-4"])
    assert code == 2 and lines == ["--set training.lr is given 2 times (training.lr=1e-4, training.lr=2e-4); give it once"]


def test_the_disk_budget_refusal_adds_up_and_offers_the_budget_it_was_given(tmp_path):
    cfg = with_changes(Config(), checkpoint={"disk_budget_gb": 12.0, "keep_last": 3, "optimizer_state": "latest"})
    gb = 10**9
    estimate = DiskEstimate(full_checkpoint=int(5.3 * gb), weights_checkpoint=int(1.8 * gb),
                            checkpoints=2 * int(5.3 * gb) + 3 * int(1.8 * gb), samples=int(0.2 * gb),
                            export=int(1.9 * gb), caches=int(0.1 * gb), full_count=2, weights_count=3)
    with pytest.raises(DiskSpaceError) as refused:
        check_disk_budget(cfg, estimate, tmp_path)
    assert str(refused.value) == (
        f"{tmp_path}: the run needs about 18.2 GB of disk but the budget checkpoint.disk_budget_gb is 12 GB: "
        f"checkpoints 16 GB (2 x 5.3 GB with optimizer state + 3 x 1.8 GB weights only) + export 1.9 GB + samples "
        f"0.2 GB + caches 0.1 GB = 18.2 GB; lower it with checkpoint.keep_last: 1, checkpoint.keep_best: false, or "
        f"raise checkpoint.disk_budget_gb to at least 18.2")


def test_score_writes_no_folder_into_the_current_folder_unasked(tmp_path, monkeypatch, capsys):
    from xtts_ft.commands import models

    seen = []

    def fake_score(cfg, model_dir, out_dir, speaker_wavs, base_model):  # the synthesis itself is tested elsewhere
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "sample_0.wav").write_bytes(b"RIFF")
        seen.append(out_dir)
        return {}

    monkeypatch.setattr(models, "score_command", fake_score)  # the name the score command calls
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text(f"dataset: {{path: {DEMO}}}\n", encoding="utf-8")
    assert main(["score", "--model", str(tmp_path), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert os.listdir(tmp_path) == ["c.yaml"] and not seen[0].exists()
    assert f"samples were written to the temporary folder {seen[0]} and removed; pass --out DIR to keep them" in out
    assert main(["score", "--model", str(tmp_path), "--config", str(config), "--out", "kept"]) == 0
    assert (tmp_path / "kept" / "sample_0.wav").is_file() and "samples kept in kept" in capsys.readouterr().out


def test_a_cue_whose_timing_cannot_be_read_is_counted_with_its_line(tmp_path):
    srt = tmp_path / "a.srt"
    srt.write_text("1\n00:00:01,000 --> 00:00:02,500\nሰላም\n\n2\n00:00:03,000 --> 00:00:11;661\nእንዴት ነህ\n\n"
                   "3\n00:00:12,000 --> 00:00:13,1000\nደህና ነኝ\n", encoding="utf-8")
    unread = []
    assert [c.text for c in read_cues(srt, unread)] == ["ሰላም"]
    assert [(u.line, u.timing, u.text) for u in unread] == [(6, "00:00:03,000 --> 00:00:11;661", "እንዴት ነህ"),
                                                           (10, "00:00:12,000 --> 00:00:13,1000", "ደህና ነኝ")]


def test_a_stopped_ingest_prints_the_command_to_run_again_from_a_real_process(tmp_path):
    """SIGTERM while it listens: exit 0, the folder as it was, the command to run it again (no traceback)."""
    import signal
    import time

    wav(tmp_path / "long.wav", 30.0)
    (tmp_path / "out").mkdir()
    config = tmp_path / "c.yaml"
    config.write_text(f"dataset: {{path: .}}\nasr: {{model: '{SMALL_MODEL_DIR}', device: cpu}}\n", encoding="utf-8")
    with open(tmp_path / "stderr.txt", "w+", encoding="utf-8") as err_file:
        proc = subprocess.Popen([sys.executable, "-m", "xtts_ft", "ingest", str(tmp_path / "long.wav"), "--out",
                                 str(tmp_path / "out"), "--config", str(config), "--move-old-aside"], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=err_file, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:  # the progress bar: the handler is in place
            if "ingest: listening" in (tmp_path / "stderr.txt").read_text(encoding="utf-8"):
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
        err = (tmp_path / "stderr.txt").read_text(encoding="utf-8")
    assert proc.returncode == 0 and "Traceback" not in err, err[-2000:]
    assert f"nothing was written, {tmp_path / 'out'} is as it was. Run it again with: " in out, out + err[-2000:]
    assert os.listdir(tmp_path / "out") == [] and sorted(os.listdir(tmp_path)) == ["c.yaml", "long.wav", "out",
                                                                                  "stderr.txt"]


def test_a_shortcut_and_a_set_of_the_same_key_are_refused_by_their_own_names(tmp_path, capsys):
    config = tmp_path / "one.yaml"
    config.write_text(f"dataset: {{path: {DEMO}}}\n", encoding="utf-8")
    code, lines = run(capsys, ["train", "--config", str(config), "--max-steps", "5", "--set", "training.max_steps=3"])
    assert code == 2 and lines == ["--max-steps 5 and --set training.max_steps=3 both set training.max_steps; give it once"]

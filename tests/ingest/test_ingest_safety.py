"""Ingest never overwrites a dataset unasked, adds to one without losing a row, and stops cleanly.

Issue 22: a second ingest into a used folder replaced its metadata.csv (the old WAVs listed nowhere);
a SIGTERM while clips were written left the old metadata.csv over a mix of old and new WAVs; a stop
printed nothing and exited 0 with no clips.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.ingest.ingesthelpers import REPO_ROOT, build_recording, demo_sentences, read_metadata, read_segments
from xtts_ft.asr import SMALL_MODEL_DIR
from xtts_ft.config import with_changes
from xtts_ft.ingest.command import ingest
from xtts_ft.ingest.source_audio import IngestError
from xtts_ft.layout import EARLIER_INGESTS
from xtts_ft.output_folder import ADD, MOVE_ASIDE, OutputFolderError
from xtts_ft.text.error_rates import cer


def _text(tmp_path, recording, name):
    path = tmp_path / name
    path.write_text("\n".join(recording.sentences), encoding="utf-8")
    return path


def _tree(folder) -> dict[str, str]:
    """Every file under ``folder`` and the sha256 of its bytes."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _clips_say_their_rows(folder, recognizer) -> None:
    """Each clip, heard by the committed recogniser, is nearest its own row's sentence of all demo sentences."""
    rows = read_metadata(folder)
    pool = sorted({text for _, text in demo_sentences()})
    heard = recognizer.transcribe_files([folder / r["audio_file"] for r in rows])
    for row, hyp in zip(rows, heard):
        nearest = min(pool, key=lambda sentence: cer(sentence, hyp))
        assert nearest == row["text"], (row["audio_file"], row["text"], hyp)


@pytest.fixture(scope="module")
def first_session(tmp_path_factory, small_recognizer):
    """A dataset made by one ingest (4 sentences), and a second recording (3 other sentences) with its text."""
    from xtts_ft.asr import SMALL_MODEL_DIR as model
    from xtts_ft.config import Config, with_changes

    cfg = with_changes(Config(), asr={"model": str(model), "device": "cpu"}, dataset={"min_duration_s": 1.0})
    root = tmp_path_factory.mktemp("sessions")
    one = build_recording(root / "one.wav", 4, pause_s=0.6)
    two = build_recording(root / "two.wav", 3, pause_s=0.6, start=6)
    ingest(cfg, [one.path], root / "ds", text=_text(root, one, "one.txt"), recognizer=small_recognizer)
    return cfg, root, two


def test_a_second_ingest_into_a_used_folder_is_refused_and_changes_nothing(first_session, small_recognizer, tmp_path):
    cfg, root, two = first_session
    before = _tree(root / "ds")
    with pytest.raises(OutputFolderError) as refused:
        ingest(cfg, [two.path], root / "ds", text=_text(tmp_path, two, "two.txt"), recognizer=small_recognizer)
    message = str(refused.value)
    assert "\n" not in message and f"--out {root / 'ds'}" in message
    assert "an earlier ingest" in message and "--add-to-existing" in message and "--move-old-aside" in message
    assert _tree(root / "ds") == before


def test_adding_a_second_session_keeps_every_old_row_and_file(first_session, small_recognizer, tmp_path):
    cfg, root, two = first_session
    import shutil

    ds = shutil.copytree(root / "ds", tmp_path / "ds")
    old_rows, old_files = read_metadata(ds), _tree(ds)
    report = ingest(cfg, [two.path], ds, text=_text(tmp_path, two, "two.txt"), recognizer=small_recognizer,
                    on_existing=ADD)
    rows = read_metadata(ds)
    assert report.clips == 3 and report.added_to_existing
    assert rows[:len(old_rows)] == old_rows and len(rows) == len(old_rows) + 3  # every old row, first and unchanged
    assert [r["text"] for r in rows[len(old_rows):]] == two.sentences
    names = [r["audio_file"] for r in rows]
    assert len(set(names)) == len(names)  # no name collides
    now = _tree(ds)
    for name, digest in old_files.items():  # every old file kept, unchanged (the old report moved, not lost)
        if name.startswith("ingest_report"):
            assert digest in {now[n] for n in now if n.startswith(EARLIER_INGESTS)}, name
        elif name not in ("metadata.csv", "segments.tsv", ".xtts_ft_output.json"):
            assert now[name] == digest, name
    assert [s["clip_file"] for s in read_segments(ds)] == names
    _clips_say_their_rows(ds, small_recognizer)


def test_move_old_aside_puts_the_old_dataset_beside_the_new_one(first_session, small_recognizer, tmp_path):
    cfg, root, two = first_session
    import shutil

    ds = shutil.copytree(root / "ds", tmp_path / "ds")
    old = _tree(ds)
    report = ingest(cfg, [two.path], ds, text=_text(tmp_path, two, "two.txt"), recognizer=small_recognizer,
                    on_existing=MOVE_ASIDE)
    aside = tmp_path / os.path.basename(report.moved_aside)
    assert aside.name.startswith("ds.old-") and _tree(aside) == old
    assert [r["text"] for r in read_metadata(ds)] == two.sentences


def test_no_clip_made_is_an_error_that_says_why_and_writes_nothing(tmp_path, ingest_cfg, small_recognizer):
    recording = build_recording(tmp_path / "a.wav", 2)
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("\n".join(t for _, t in demo_sentences()[10:12]), encoding="utf-8")  # not what it says
    ingest_cfg = with_changes(ingest_cfg, ingest={"min_score": 0.95})
    with pytest.raises(IngestError, match=r"no clips made \(.*\); nothing was written to"):
        ingest(ingest_cfg, [recording.path], tmp_path / "ds", text=wrong, recognizer=small_recognizer)
    assert not (tmp_path / "ds").exists()


# Clips of the stopped ingest: the stop falls at a random one of them. The time to get there grows with the count
# (listening to and aligning the whole recording come before the first clip is written: ~20 s for 80 clips on 2 busy
# cores; 240 clips took up to 75 s).
CLIPS = 80


def test_sigterm_at_a_random_moment_of_a_long_ingest_leaves_the_old_dataset_or_the_new(tmp_path, ingest_cfg,
                                                                                      small_recognizer):
    seed = random.SystemRandom().randrange(10**6)
    rng = random.Random(seed)
    old = build_recording(tmp_path / "old.wav", 6, pause_s=0.5, start=1)
    new = build_recording(tmp_path / "new.wav", CLIPS, pause_s=0.3, lead_s=0.3, shortest=12)  # 4.4 min of audio
    config = tmp_path / "ingest.yaml"
    config.write_text(f"dataset:\n  path: .\n  min_duration_s: 1.0\nasr:\n  model: {SMALL_MODEL_DIR}\n  device: cpu\n",
                      encoding="utf-8")
    ds = tmp_path / "ds"
    ingest_cfg = with_changes(ingest_cfg, dataset={"min_duration_s": 1.0})
    ingest(ingest_cfg, [old.path], ds, text=_text(tmp_path, old, "old.txt"), recognizer=small_recognizer)
    before = _tree(ds)
    command = [sys.executable, "-m", "xtts_ft", "ingest", str(new.path), "--text", str(_text(tmp_path, new, "new.txt")),
               "--out", str(ds), "--config", str(config), "--move-old-aside"]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    streams = {"out": [], "err": []}
    readers = [threading.Thread(target=lambda pipe=pipe, into=into: into.extend(iter(lambda: pipe.read(256), "")))
               for pipe, into in ((proc.stdout, streams["out"]), (proc.stderr, streams["err"]))]
    for reader in readers:
        reader.start()
    written = rng.randrange(0, CLIPS)  # 0: while it listens; else once that many new clips are staged
    staging = lambda: [p for p in tmp_path.iterdir() if p.name.startswith(".ds.staging")]  # noqa: E731
    deadline = time.monotonic() + 240
    if written == 0:  # once it has started listening (its progress bar), a moment later: by progress, not by clock
        while proc.poll() is None and time.monotonic() < deadline and "listening" not in "".join(streams["err"]):
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.5))
    else:
        while proc.poll() is None and time.monotonic() < deadline:
            stage = staging()
            if stage and len(list((stage[0] / "wavs").glob("*.wav"))) >= written:
                break
            time.sleep(0.002)
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    for reader in readers:
        reader.join(timeout=30)
    out, err = "".join(streams["out"]), "".join(streams["err"])
    stopped_in = time.monotonic() - signalled
    why = f"seed {seed}, signal after {written} clip(s) staged\n{out}\n{err[-3000:]}"
    finished = f"ingest (text): {CLIPS} clips" in out
    # a signal that came after the ingest had finished and printed its summary meets a process on its way out, with
    # the system's default for it (killed by the signal): its work is complete either way, as checked below
    assert (proc.returncode == 0 or finished and proc.returncode == -signal.SIGTERM) and "Traceback" not in err, why
    assert not staging(), why  # the half-built folder is gone
    if "ingest stopped" in out:
        assert stopped_in < 10, why
        assert f"nothing was written, {ds} is as it was" in out and "Run it again with:" in out, why
        assert "--move-old-aside" in out.split("Run it again with:")[1], why
        assert _tree(ds) == before, why  # the old dataset, byte for byte: no new clip mixed in
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("ds.old-")], why
        _clips_say_their_rows(ds, small_recognizer)
    else:  # the stop came after the swap: the whole new dataset, the old one beside it
        assert finished, why
        assert len(read_metadata(ds)) == CLIPS, why
        _clips_say_their_rows(ds, small_recognizer)


def test_adding_to_a_dataset_made_by_hand_keeps_its_columns_and_rows(tmp_path):
    """The demo dataset (3 columns, its own file names): rows appended in its layout, no name reused."""
    import shutil

    from tests.ingest.ingesthelpers import DEMO
    from xtts_ft.ingest.clips import Clip
    from xtts_ft.ingest.output import IngestReport, write_dataset
    from xtts_ft.ingest.source_audio import open_sources
    from xtts_ft.output_folder import staged_output

    recording = build_recording(tmp_path / "take.wav", 2)
    ds = shutil.copytree(DEMO, tmp_path / "demo")
    (ds / "wavs" / "clip_000007.wav").write_bytes(b"a stray file of the user's")  # listed nowhere, still never reused
    old_lines = (ds / "metadata.csv").read_text(encoding="utf-8").splitlines()
    clips = [Clip(0, a - 0.2, b + 0.2, text, 0.9, "alignment", [k]) for k, ((a, b), text)
             in enumerate(zip(recording.spans, recording.sentences))]
    with staged_output(ds, "ingest", ADD, replace_own=False) as staged:
        write_dataset(clips, open_sources([recording.path]), staged.path, "reader",
                      IngestReport(mode="text", out_dir=str(ds)), adding=True)
    lines = (ds / "metadata.csv").read_text(encoding="utf-8").splitlines()
    assert lines[:len(old_lines)] == old_lines and len(lines) == len(old_lines) + 2
    assert lines[-2:] == [f"wavs/clip_000008.wav|{recording.sentences[0]}|reader",
                          f"wavs/clip_000009.wav|{recording.sentences[1]}|reader"]
    assert (ds / "wavs" / "clip_000007.wav").read_bytes() == b"a stray file of the user's"

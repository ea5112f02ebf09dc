import json
import math
from pathlib import Path

import pytest
import soundfile as sf

from tests.evaluate.evalhelpers import MAX_NEW_TOKENS, SR, train_steps, voice_like
from xtts_ft.assess.listener import Heard
from xtts_ft.config import config_from_dict
from xtts_ft.errors import DataError
from xtts_ft.evaluate.hook import make_eval_hook
from xtts_ft.evaluate.listening import reference_quality
from xtts_ft.evaluate.report import write_report


def _cfg(tmp_path, run_dir, **evaluation):
    data = tmp_path / "dataset"
    data.mkdir(exist_ok=True)
    ev = {"sentences": ["the quick fox"], "max_new_tokens": MAX_NEW_TOKENS, "mcd_clips": 1, **evaluation}
    return config_from_dict({"run": {"output_dir": str(run_dir), "seed": 7}, "dataset": {"path": str(data)}, "evaluation": ev})


class HearsPeterPiper:
    """A recogniser that hears the eval clips' text in every file."""

    def transcribe_files(self, paths):
        return ["peter piper" for _ in paths]


class FixedListener:
    """A stand-in for xtts_ft.assess.listener.Listener: samples rate 2.0 and run on for 0.5 s, recordings rate 3.0."""

    def __init__(self):
        self.heard = []

    def listen_file(self, path, text=None):
        self.heard.append(Path(path).name)
        sample = Path(path).parent.name.startswith("step_")
        return Heard(2.0 if sample else 3.0, 20.0, 0.5 if sample and text else None)


def test_eval_hook_writes_samples_index_tensorboard_and_restores_the_model(trained, tokenizer, speaker_wav, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    run_dir = tmp_path / "run"
    wavs = run_dir / "data" / "wavs"
    wavs.mkdir(parents=True)
    clips = []
    for i in range(2):
        sf.write(str(wavs / f"clip_{i}.wav"), voice_like(2.0, seed=10 + i), SR)
        clips.append((wavs / f"clip_{i}.wav", "peter piper"))
    writer = SummaryWriter(str(run_dir / "tensorboard"))
    listener = FixedListener()
    hook = make_eval_hook(_cfg(tmp_path, run_dir), run_dir, tokenizer, [speaker_wav], clips, (0.01, 10.0), writer=writer,
                          recognizer=HearsPeterPiper(), listener=listener)

    trained.train()
    keys = set(trained.state_dict())
    modes = {n: m.training for n, m in trained.named_modules()}
    metrics = hook(5, trained)
    writer.close()

    assert set(trained.state_dict()) == keys
    assert {n: m.training for n, m in trained.named_modules()} == modes and trained.xtts.gpt.training
    train_steps(trained, tokenizer, steps=1)  # training continues after an evaluation

    assert all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())
    assert 0.0 <= metrics["sample_stop_rate"] <= 1.0 and 0.0 <= metrics["sample_silence_ratio"] <= 1.0
    assert metrics["sample_rtf"] > 0 and metrics["sample_rate_in_range"] == 1.0
    assert metrics["mcd"] > 0

    step_dir = run_dir / "samples" / "step_000005"
    assert sorted(p.name for p in step_dir.iterdir()) == ["mcd_0_clip_0.wav", "voice_a_0.wav"]  # mcd_clips=1
    lines = (run_dir / "samples" / "index.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["step"] == 5 and record["dir"] == "samples/step_000005"
    assert record["metrics"] == pytest.approx(metrics)
    assert record["samples"][0]["path"] == "samples/step_000005/voice_a_0.wav"
    assert record["mcd_samples"][0]["reference_wav"] == "data/wavs/clip_0.wav"
    assert record["mcd_samples"][0]["mcd"] == pytest.approx(metrics["mcd"])

    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"audio": 0})
    acc.Reload()
    assert {"samples/voice_a_0", "mcd_samples/mcd_0_clip_0"} <= set(acc.Tags()["audio"])

    floor = json.loads((run_dir / "samples" / "cer_floor.json").read_text(encoding="utf-8"))
    assert floor["clips"] == 2 and floor["cer_floor"] == 0.0  # the real clips say exactly their text
    assert metrics["sample_cer"] > 0  # the samples were asked for "the quick fox"

    # listened to: the samples (not the MCD clips) and the real clips once; the tail rate short texts first
    assert listener.heard == ["voice_a_0.wav", "clip_0.wav", "clip_1.wav"]
    assert metrics["sample_quality_mos"] == 2.0 and metrics["reference_quality_mos"] == 3.0
    assert metrics["quality_mos_difference"] == -1.0
    assert metrics["sample_tail_rate"] == metrics["sample_tail_rate_short"] == 1.0  # 0.5 s > evaluation.max_tail_s
    assert record["samples"][0]["tail_s"] == 0.5 and record["samples"][0]["quality_mos"] == 2.0

    html = write_report(run_dir).read_text(encoding="utf-8")
    assert "2 / 3 (-1.00)" in html and "trained on English listeners" in html and "Tail rate is the share" in html
    assert "against a floor of 0</td>" in html
    assert html.count("<audio") == 3  # the sample, the MCD sample and its recording
    assert 'src="samples/step_000005/voice_a_0.wav"' in html and 'src="data/wavs/clip_0.wav"' in html


def test_eval_hook_refuses_missing_references_at_construction(tokenizer, speaker_wav, tmp_path):
    cfg = _cfg(tmp_path, tmp_path / "run")
    with pytest.raises(DataError, match="does not exist"):
        make_eval_hook(cfg, tmp_path / "run", tokenizer, [tmp_path / "missing.wav"], [], None)
    with pytest.raises(DataError, match="no reference voice"):
        make_eval_hook(cfg, tmp_path / "run", tokenizer, [], [], None)
    with pytest.raises(DataError, match="does not exist"):
        make_eval_hook(cfg, tmp_path / "run", tokenizer, [speaker_wav], [(tmp_path / "gone.wav", "x")], None)
    # clips beyond evaluation.mcd_clips are never read, so they are not checked
    make_eval_hook(_cfg(tmp_path, tmp_path / "run", mcd_clips=0), tmp_path / "run", tokenizer, [speaker_wav],
                   [(tmp_path / "gone.wav", "x")], None)


def test_the_recordings_quality_is_measured_once_per_run_and_again_for_other_clips(tmp_path):
    clips = []
    for i in range(3):
        sf.write(str(tmp_path / f"clip_{i}.wav"), voice_like(1.0, seed=i), SR)
        clips.append((tmp_path / f"clip_{i}.wav", "text"))
    listener = FixedListener()
    assert reference_quality(tmp_path / "run", listener, clips, 2) == 3.0
    assert reference_quality(tmp_path / "run", listener, clips, 2) == 3.0  # read back: not listened to again
    assert listener.heard == ["clip_0.wav", "clip_1.wav"]
    assert reference_quality(tmp_path / "run", listener, clips, 3) == 3.0  # another set of clips: measured again
    assert len(listener.heard) == 5
    assert reference_quality(tmp_path / "run", listener, clips, 0) is None

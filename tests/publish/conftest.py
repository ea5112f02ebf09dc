"""A finished run folder to publish, written with the project's own writers (no training, no synthesis).

Two checkpoints saved by ``save_checkpoint`` (step 2 has the lower eval loss, so it is the run's best;
step 4 is the latest), an evaluation record of each step in ``samples/index.jsonl`` built from
``SampleResult`` and ``summarize`` as the evaluation hook builds it, WAV samples, and
``data/report.json`` from a ``PrepareReport``. The GPT is the tiny base model's, its text rows grown
for the ``[am]`` token the run's vocabulary adds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

SR = 24000
SENTENCES = ("ሰላም", "ዛሬ የአየር ሁኔታው ጥሩ ነው፤ ወደ ገበያ እንሄዳለን።", "ረጅም ዓረፍተ ነገር " * 12)
RUN_ID = "20261125-120000-abc123"


def _samples(run_dir: Path, step: int, cers: tuple[float, ...]):
    from xtts_ft.evaluate.synthesis import SampleResult
    from xtts_ft.layout import RunLayout

    folder = RunLayout(run_dir).samples_at(step)
    folder.mkdir(parents=True)
    ref = run_dir / "data" / "wavs" / "spk1_001.wav"
    out = []
    for i, (text, cer) in enumerate(zip(SENTENCES, cers)):
        path = folder / f"spk1_{i}.wav"
        sf.write(str(path), 0.1 * np.sin(np.arange(SR // 2) * (0.05 + 0.01 * i)).astype(np.float32), SR)
        out.append(SampleResult(
            name=path.stem, speaker="spk1", index=i, text=text, normalized_text=text.strip(), path=path,
            reference_wav=ref, sample_rate=SR, n_codes=20, max_codes=40, ended_with_stop=i > 0, duration_s=0.5,
            seconds_per_char=0.1, seconds_per_char_in_range=True, silence_ratio=0.1, synthesis_s=0.2, rtf=0.4,
            recognized_text=text[: max(1, len(text) // 2)], cer=cer, speaker_similarity=0.8 + 0.01 * i))
    return out


def _record(run_dir: Path, step: int, samples) -> dict:
    from xtts_ft.evaluate.hook import summarize

    return {"step": step, "dir": f"samples/step_{step:06d}", "metrics": summarize(samples, []),
            "samples": [s.to_json(relative_to=run_dir) for s in samples], "mcd_samples": []}


@pytest.fixture(scope="session")
def run_folder(tiny_base_dir, tmp_path_factory) -> Path:
    from tokenizers import Tokenizer

    from xtts_ft.checkpoint_store import CheckpointStore
    from xtts_ft.config import Config
    from xtts_ft.config.loading import dump_config
    from xtts_ft.data.reasons import REASONS
    from xtts_ft.data.report import PrepareReport
    from xtts_ft.layout import RunLayout
    from xtts_ft.model import base_state_dict, describe_vocab
    from xtts_ft.run_folder import RunRecord, write_record
    from xtts_ft.tokenizer.fingerprint import vocab_fingerprint
    from xtts_ft.tokenizer.resize import resize_text_rows
    from xtts_ft.training_state import TrainingState

    run = tmp_path_factory.mktemp("published") / "runs" / "amharic"
    layout = RunLayout(run)
    layout.tokenizer.mkdir(parents=True)
    tok = Tokenizer.from_file(str(tiny_base_dir / "vocab.json"))
    tok.add_special_tokens(["[am]"])
    tok.save(str(layout.vocab))
    write_record(run, RunRecord(run_id=RUN_ID, created="2026-11-25T12:00:00", fingerprint=None))
    (layout.data / "wavs").mkdir(parents=True)
    sf.write(str(layout.data / "wavs" / "spk1_001.wav"), np.zeros(SR, np.float32), SR)
    report = PrepareReport(kept=120, kept_train=110, kept_eval=10, rejected={r: 0 for r in REASONS}, hours=1.25,
                           speakers={"spk1": 70, "spk2": 50})
    (layout.data / "report.json").write_text(json.dumps(report.to_dict()), encoding="utf-8")
    cfg = Config()
    dump_config(cfg, layout.config)

    gpt = {k[4:]: v for k, v in base_state_dict(tiny_base_dir / "model.pth").items() if k.startswith("gpt.")}
    gpt = resize_text_rows(gpt, describe_vocab(layout.vocab), prefix="")
    records = []
    for step, eval_loss, cers in ((2, 1.5, (2.5, 0.4, 0.3)), (4, 2.5, (3.0, 0.9, 0.8))):
        samples = _samples(run, step, cers)
        records.append(_record(run, step, samples))
        state = TrainingState(step=step, epoch=0, gpt={k: v.clone() for k, v in gpt.items()}, sampler={}, rng=[],
                              stability={}, lr_factor=1.0, precision="fp32", training_config={},
                              vocab_fingerprint=vocab_fingerprint(layout.vocab), base_vocab_size=tok.get_vocab_size() - 1)
        CheckpointStore(layout).save(state, vocab_path=layout.vocab, write_config=lambda p: dump_config(cfg, p),
                                     run_id=RUN_ID, base_model=str(tiny_base_dir), eval_loss=eval_loss,
                                     eval_metrics=records[-1]["metrics"])
    layout.samples_index.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                                    encoding="utf-8")
    return run

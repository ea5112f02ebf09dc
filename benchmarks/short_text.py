"""Benchmark: the server's short-text mitigation, measured on the evaluation's short-text set.

    python benchmarks/short_text.py --model runs/demo --asr xtts_ft/asr/small_model --seeds 5

The set is the ``short`` bucket (at most 20 characters of normalised text) of the default
evaluation sentences (``evaluation.sentences`` in xtts_ft/config/schema.py: one word, a thank-you,
a number, a question). Each is spoken with ``--seeds`` seeds two ways, with the same model and voice:

- plain: what a server without the mitigation does (one generation up to the model's code limit);
- mitigated: the engine as ``serve`` runs it (length cap per piece, retries with the next seeds
  when a short piece misses the stop token; ``ServeConfig`` in the schema holds the numbers).

Prints per condition: stop rate (generation ended with the stop token), mean and max seconds of
audio, mean seconds per character, the share of samples slower than the training data's 95th
percentile pace (from the run's prepared data, when the model came from a run) and, with ``--asr``,
the character error rate of what the recogniser hears (``xtts_ft.text.error_rates``).

Training with and without short pieces (``dataset.short_clips``, issue 34)::

    python benchmarks/short_text.py --train-compare --steps 40 --base runs/tiny_base

trains the demo (configs/demo.yaml, the tiny random model unless ``--base`` names another) twice, same
seed and steps, with ``dataset.short_clips: off`` and ``auto``, and prints side by side: the pieces
made, training rows, the final eval loss, and the evaluation's short-text rows (CER, stop rate) and
seconds per character over its sentences. The tiny random model cannot speak: its CER is about 1 and its
stop rate about 0 either way, so these numbers show that both runs train and are evaluated alike, not
that pieces help; that needs the real XTTS-v2 base and real data.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def short_set(engine) -> list[str]:
    from xtts_ft.config import DEFAULT_TEST_SENTENCES
    from xtts_ft.evaluate.intelligibility import length_bucket

    return [s for s in DEFAULT_TEST_SENTENCES if length_bucket(engine.normalized_text(s)) == "short"]


def variant(engine, **changes):
    from xtts_ft.serve.engine import SpeechEngine

    return SpeechEngine(engine.xtts, engine.tokenizer, engine.meta, engine.source, engine.voices,
                        settings=dataclasses.replace(engine.settings, **changes), temperature=engine.temperature,
                        max_codes=engine.max_codes, loop=engine.loop)  # one decode thread


COMPARED = ("eval_loss", "sample_cer_short", "sample_stop_rate_short", "sample_seconds_per_char")


def train_compare(steps: int, base: str, keep: str | None) -> None:
    """The demo trained with dataset.short_clips off and auto; the short-text rows side by side."""
    import json
    import subprocess

    from xtts_ft.layout import RunLayout
    from xtts_ft.run_history import read_metrics

    scratch = tempfile.TemporaryDirectory(prefix="short_train_")
    root = Path(keep) if keep else Path(scratch.name)
    rows = {}
    for setting in ("off", "auto"):
        run_dir = root / f"short_clips_{setting}"
        command = [sys.executable, "headless_train.py", "--config", "configs/demo.yaml", "--max-steps", str(steps),
                   "--set", f"run.output_dir={run_dir}", "--set", f"base_model.source={base}",
                   "--set", f"dataset.short_clips={setting}", "--set", "training.cpu_threads=1",
                   "--set", "training.num_workers=0", "--set", "training.warmup_steps=3",
                   "--set", "evaluation.every_steps=0",
                   "--set", "evaluation.mcd_clips=0", "--set", f"checkpoint.every_steps={steps}"]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"the {setting} run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
        last = [m for m in read_metrics(run_dir) if any(k in m for k in COMPARED)]
        layout = RunLayout(run_dir)
        report = json.loads(layout.data_report.read_text(encoding="utf-8"))
        train_rows = len(layout.train_csv.read_text(encoding="utf-8").splitlines()) - 1
        merged = {k: v for m in last for k, v in m.items() if k in COMPARED}  # the latest value of each
        rows[setting] = {"pieces": report.get("short_pieces", {}).get("made", 0), "train rows": train_rows,
                         "under 20 chars": report["short_clips"]["short_text_share"], **merged,
                         "wall s": round(time.perf_counter() - start)}
    keys = list(dict.fromkeys(k for r in rows.values() for k in r))
    print(f"demo, {steps} steps, base {base}; short_clips off vs auto")
    for k in keys:
        values = [rows[s].get(k) for s in ("off", "auto")]
        print(f"  {k:24s}" + "".join(f"{v:>12.4g}" if isinstance(v, (int, float)) else f"{'-':>12}" for v in values))


def main() -> None:
    from xtts_ft.serve.engine import SpeechEngine
    from xtts_ft.serve.model_source import resolve_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-compare", action="store_true", help="Train the demo with and without short pieces.")
    p.add_argument("--steps", type=int, default=40, help="--train-compare: training steps of each run.")
    p.add_argument("--base", default="runs/tiny_base", help="--train-compare: base_model.source of both runs.")
    p.add_argument("--keep", help="--train-compare: keep the two runs in this folder (default: a temporary one).")
    p.add_argument("--model", help="Export, checkpoint or run folder (as for serve).")
    p.add_argument("--voice", help="Reference clip (default: the run's first speaker).")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--asr", help="Recogniser (folder or repo id) for CER, e.g. xtts_ft/asr/small_model.")
    p.add_argument("--max-codes", type=int, help="Lower the model's code limit (as serve --max-codes).")
    args = p.parse_args()
    if args.train_compare:
        return train_compare(args.steps, args.base, args.keep)
    if not args.model:
        p.error("--model is required (or --train-compare)")

    scratch = tempfile.TemporaryDirectory(prefix="short_text_")  # the samples and a copied voice; removed at exit
    source = resolve_model(args.model)
    engine = SpeechEngine.open(source, "cpu", max_codes=args.max_codes)
    if args.voice:
        voice_dir = Path(scratch.name) / "voice"
        voice_dir.mkdir()
        (voice_dir / ("voice" + Path(args.voice).suffix)).write_bytes(Path(args.voice).read_bytes())
        from xtts_ft.serve.voices import VoiceLibrary

        engine.voices = VoiceLibrary(folder=voice_dir)
    voice = engine.voices.list()[0]
    pace_p95 = None
    if source.run_dir is not None:
        from xtts_ft.config import EvaluationConfig
        from xtts_ft.evaluate.references import pick_references
        from xtts_ft.layout import RunLayout

        refs = pick_references(EvaluationConfig(), RunLayout(source.run_dir).data, engine.language)
        pace_p95 = refs.seconds_per_char_range[1] if refs.seconds_per_char_range else None
    recognizer = None
    if args.asr:
        from xtts_ft.asr.recognizer import Recognizer
        from xtts_ft.config import AsrConfig

        recognizer = Recognizer.from_config(AsrConfig(model=args.asr))

    sentences = short_set(engine)
    conditions = {
        "plain": dict(short_text_retries=0, max_seconds_per_char=1e6),  # cap = the model's limit
        "mitigated": {},
    }
    print(f"model: {source.describe()}; voice {voice.name}; {len(sentences)} short sentences x {args.seeds} seeds; "
          f"model code limit {engine.max_codes}; training pace p95 "
          f"{f'{pace_p95:.3f} s/char' if pace_p95 else 'unknown'}", flush=True)
    out = Path(scratch.name)
    for name, changes in conditions.items():
        rows = []
        start = time.perf_counter()
        for seed in range(args.seeds):
            speaker = variant(engine, seed=seed * 10, **changes)  # seeds 10 apart: retries use seed+1, seed+2
            for i, text in enumerate(sentences):
                piece = speaker.pieces(text)[0]
                r = speaker.synthesize_piece(piece, voice)
                path = out / f"{name}_{seed}_{i}.wav"
                sf.write(path, r.audio, engine.sample_rate)
                seconds = r.audio.size / engine.sample_rate
                rows.append({"text": text, "piece": piece, "stop": r.ended_with_stop, "seconds": seconds,
                             "spc": seconds / max(1, len(piece)), "path": path})
        if recognizer is not None:
            from xtts_ft.text.error_rates import error_rates

            for row, heard in zip(rows, recognizer.transcribe_files([r["path"] for r in rows])):
                row["cer"] = error_rates(row["text"], heard).cer
        wall = time.perf_counter() - start
        line = (f"{name:9s}: stop rate {np.mean([r['stop'] for r in rows]):.2f}; audio mean "
                f"{np.mean([r['seconds'] for r in rows]):.2f} s, max {max(r['seconds'] for r in rows):.2f} s; "
                f"{np.mean([r['spc'] for r in rows]):.3f} s/char")
        if pace_p95:
            line += f"; slower than training p95: {np.mean([r['spc'] > pace_p95 for r in rows]):.2f}"
        if recognizer is not None:
            line += f"; CER {np.mean([r['cer'] for r in rows]):.3f}"
        print(line + f"; {wall:.0f} s wall", flush=True)


if __name__ == "__main__":
    main()

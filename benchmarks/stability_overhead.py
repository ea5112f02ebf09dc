"""What the trainer's safety and speed features cost, side by side in one run on the tiny XTTS.

    python benchmarks/stability_overhead.py                  # CPU
    python benchmarks/stability_overhead.py --device cuda    # the GPU at hand (precision: auto)

1. Stability checks: the trainer's real step (``StepRunner.run``) (finite-loss flags, grad norm and loss scale
   fetched in one sync, skip/rollback bookkeeping) against the same step without them (forward,
   backward, unscale, clip, ``scaler.step``, update - a loop with no defence). Target: < 1 %.
2. DVAE code cache: the same step with codes read from the cache against codes computed by the
   DVAE every step (coqui's way). Target: >= 1.3x faster steps.

Both runs use a synthetic dataset (sums of sines, 1-3 s clips), the same data order and batch size;
timings are medians over steps measured in alternating blocks so machine noise hits both sides.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from xtts_ft.base_model import BaseModelFiles  # noqa: E402
from xtts_ft.config import Config, with_changes  # noqa: E402
from xtts_ft.layout import EVAL_CSV, TRAIN_CSV, VOCAB_FILE  # noqa: E402

SR = 22050
WORDS = "the quick brown fox jumps over lazy dog she sells sea shells by shore peter piper picked peck".split()


def write_fixture(root: Path, clips: int) -> dict:
    """A tiny base model, its vocabulary plus [am], and a coqui-format dataset of ``clips`` clips."""
    from tokenizers import Tokenizer

    from xtts_ft.random_model import write_tiny_model

    base = BaseModelFiles.from_dir(write_tiny_model(root / "tiny"))
    tok = Tokenizer.from_file(str(base.vocab_json))
    base_size = tok.get_vocab_size()
    tok.add_special_tokens(["[am]"])
    tok.save(str(root / VOCAB_FILE))
    (root / "data" / "wavs").mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows = ["audio_file|text|speaker_name"]
    for i in range(clips):
        t = np.arange(int(SR * rng.uniform(1.0, 3.0))) / SR
        wav = sum(0.2 / k * np.sin(2 * math.pi * (110 + 13 * i) * k * t) for k in range(1, 5))
        wav = (wav + 0.01 * rng.standard_normal(t.shape)).astype(np.float32)
        sf.write(str(root / "data" / "wavs" / f"c{i}.wav"), wav, SR, subtype="PCM_16")
        rows.append(f"wavs/c{i}.wav|{' '.join(rng.choice(WORDS, 4))}|spk")
    (root / "data" / TRAIN_CSV).write_text("\n".join(rows) + "\n", encoding="utf-8")
    (root / "data" / EVAL_CSV).write_text(rows[0] + "\n" + rows[1] + "\n", encoding="utf-8")
    return {"base": base, "vocab": root / VOCAB_FILE, "base_vocab_size": base_size, "data": root / "data"}


def make_recipe(fx: dict, run_dir: Path, device: str, cache: bool, batch_size: int, model):
    import copy

    from tests.fixtures.faults import patched_recipe
    from xtts_ft.pipeline import training_handles
    from xtts_ft.run_folder import claim_run_folder
    from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer
    from xtts_ft.train.distributed import setup_distributed
    from xtts_ft.train.loop import FineTuneRecipe, TrainInputs

    cfg = with_changes(Config(), run={"output_dir": str(run_dir), "device": device}, precision={"mode": "auto"},
                       training={"max_steps": 10_000, "batch_size": batch_size, "lr": 1e-4, "warmup_steps": 0,
                                 "num_workers": 0, "cache_dvae_codes": cache, "min_conditioning_s": 0.5,
                                 "max_conditioning_s": 1.0})
    tokenizer = AmharicTokenizer(str(fx["vocab"]), normalizer=lambda s: s, char_limit=200, fold_homophones=False)
    record = claim_run_folder(run_dir, fingerprint=None, resume=cfg.checkpoint.resume)
    inputs = TrainInputs(base=fx["base"], vocab_path=fx["vocab"], base_vocab_size=fx["base_vocab_size"],
                         train_csv=fx["data"] / TRAIN_CSV, eval_csv=fx["data"] / EVAL_CSV,
                         run_dir=run_dir)
    recipe = FineTuneRecipe(cfg, inputs,
                            handles=training_handles(cfg, setup_distributed(device), fx["vocab"], record, tokenizer))
    with patched_recipe(lambda *_: copy.deepcopy(model)):
        recipe.setup()
    return recipe


def unchecked_step(r) -> None:
    """The same optimizer step with no defence: no finite flags, no fetch, no skip logic."""
    s, parts, stepper = r.session, r.parts, r.stepper
    accum, scaler = s.plan.grad_accum_steps, parts.stability.scaler
    for _ in range(accum):
        batch = stepper.next_batch()
        inputs = r.model_inputs(batch, train=True)
        with parts.stability.policy.autocast():
            out = parts.ddp_model(**{**inputs, "cond_idxs": inputs["cond_idxs"].clone()})
        scaler.scale(out["loss"] / accum).backward()
    scaler.unscale_(r.optimizer)
    torch.nn.utils.clip_grad_norm_(parts.opt.trainable, s.training.grad_clip)
    scaler.step(r.optimizer)
    scaler.update()
    r.optimizer.zero_grad(set_to_none=True)


def timed(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def compare(a, b, device: torch.device, steps: int) -> tuple[float, float]:
    """Median seconds per call of ``a`` and ``b``, measured in alternating blocks after a warm-up."""
    block = min(5, steps)
    for _ in range(min(3, steps)):
        a(), b()
    ta, tb = [], []
    while len(ta) < steps:
        ta += [timed(a, device) for _ in range(block)]
        tb += [timed(b, device) for _ in range(block)]
    return statistics.median(ta), statistics.median(tb)


def isolated_check_cost(device: torch.device, reps: int = 1000) -> float:
    """Seconds per step of the check arithmetic alone (flags, stack, the one fetch), without a model."""
    from xtts_ft.train.stability import fetch_step_stats

    loss = torch.rand(3, device=device)
    norm, scale = torch.rand((), device=device), torch.ones((), device=device)

    def once() -> None:
        rows = [torch.stack([loss[0], loss[1], loss[2]])]
        fetch_step_stats(rows, norm, scale, torch.full((1,), 0.0, device=device))

    for _ in range(10):
        once()
    return timed(lambda: [once() for _ in range(reps)], device) / reps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--steps", type=int, default=40, help="timed steps per variant")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--clips", type=int, default=24)
    p.add_argument("--json", type=Path, help="also write the numbers here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fx = write_fixture(root, args.clips)
        from xtts_ft.model import build_training_model
        from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer

        tokenizer = AmharicTokenizer(str(fx["vocab"]), normalizer=lambda s: s, char_limit=200, fold_homophones=False)
        model = build_training_model(fx["base"], fx["vocab"], tokenizer)
        cached = make_recipe(fx, root / "run_cache", args.device, True, args.batch_size, model)
        uncached = make_recipe(fx, root / "run_nocache", args.device, False, args.batch_size, model)
        try:
            checked = lambda: cached.stepper.run(cached.progress)  # noqa: E731 - the recipe's step, all checks on
            checked_s, unchecked_s = compare(checked, lambda: unchecked_step(cached), device, args.steps)
            cache_s, nocache_s = compare(checked, lambda: uncached.stepper.run(uncached.progress), device,
                                         max(2, args.steps // 2))
            alone_s = isolated_check_cost(device)
        finally:
            cached.cleanup()
            uncached.cleanup()
    overhead = checked_s / unchecked_s - 1.0
    speedup = nocache_s / cache_s
    precision = cached.parts.stability.policy.name
    print(f"tiny XTTS on {device} ({precision}), batch {args.batch_size}, median of {args.steps} steps per variant")
    print(f"stability checks: {1e3 * checked_s:8.1f} ms/step with, {1e3 * unchecked_s:8.1f} ms/step without "
          f"-> overhead {100 * overhead:+.2f}% (target < 1%)")
    share = 100 * alone_s / unchecked_s
    print(f"                  the check arithmetic alone: {1e6 * alone_s:.0f} us/step = {share:.2f}% "
          f"of a step (the A/B difference above is within timing noise when it is smaller than ~1%)")
    print(f"DVAE code cache:  {1e3 * cache_s:8.1f} ms/step with, {1e3 * nocache_s:8.1f} ms/step without "
          f"-> {speedup:.2f}x faster with the cache (target >= 1.3x)")
    if args.json:
        args.json.write_text(json.dumps({
            "device": str(device), "precision": precision, "batch_size": args.batch_size, "steps": args.steps,
            "checked_s": checked_s, "unchecked_s": unchecked_s, "overhead": overhead, "check_ops_s": alone_s,
            "cache_s": cache_s, "nocache_s": nocache_s, "cache_speedup": speedup,
        }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The evaluation's vocoding before and after issue 33's speed-up, on the same samples, side by side.

    python benchmarks/eval_speed.py                      # the demo's evaluation: 10 samples of 100 codes
    python benchmarks/eval_speed.py --samples 2 --codes 10 --rounds 1    # a few seconds (the smoke test)

The tiny random XTTS (its HiFiGAN is full size: the vocoder does the same work as a real model's) decodes
``--samples`` samples (the demo evaluates 8 sentences and 2 MCD clips, each capped at 100 codes) once, in one
batch, from the run's seed, exactly as ``evaluate/synthesis.py`` does. Their latents are then vocoded by:

- ``old``: what the evaluation did before, at the trainer's thread count (``--threads``, default torch's):
  ``hifigan_decoder(latents, g)`` under ``no_grad``, its weight norm recomputed at every call;
- ``new``: :func:`xtts_ft.inference.vocoding.vocode_all`: as many samples at once as the trainer has
  threads, each on one intra-op thread, each weight-normed weight computed once.

The two alternate for ``--rounds`` rounds (a shared machine's load changes; alternating gives both the same
chances). Printed: each round's seconds, the total ratio old/new, and the largest sample difference between
the two paths' audio (float rounding only: one intra-op thread against the trainer's count).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

VOICE = ROOT / "datasets" / "amharic_demo" / "wavs" / "spk1_001.flac"  # the voice serve_load.py uses
TEXTS = ("the quick brown fox", "jumps over the lazy dog", "peter piper picked", "a peck of peppers",
         "she sells sea shells", "by the sea shore", "red lorry yellow lorry", "how much wood")


def decode_samples(work: Path, samples: int, codes: int, seed: int, base_dir: Path | None = None):
    """(xtts, [(latents, speaker embedding)]) of ``samples`` decoded as the evaluation decodes them."""
    import torch
    from TTS.tts.layers.xtts.tokenizer import VoiceBpeTokenizer

    from xtts_ft.base_model import BaseModelFiles
    from xtts_ft.evaluate.synthesis import EVAL_BATCH, gpt_ready_for_inference
    from xtts_ft.inference.batch_decode import DecodeRequest, Sampling, decode_all, prefix_embeddings
    from xtts_ft.inference.conditioning import conditioning
    from xtts_ft.model import build_xtts
    from xtts_ft.random_model import write_tiny_model

    base = BaseModelFiles.from_dir(base_dir or write_tiny_model(work / "tiny_base", seed=0))
    tokenizer = VoiceBpeTokenizer(str(base.vocab_json))
    xtts = build_xtts(base, base.vocab_json, tokenizer)
    with torch.no_grad(), gpt_ready_for_inference(xtts, codes):
        gpt_latent, speaker = conditioning(xtts, VOICE)
        requests = []
        for i in range(samples):
            tokens = torch.IntTensor(tokenizer.encode(TEXTS[i % len(TEXTS)], lang="en")).unsqueeze(0)
            requests.append(DecodeRequest(prefix_embeddings(xtts.gpt, gpt_latent, tokens), codes, Sampling(), seed))
        decode_all(xtts.gpt, requests, max_batch=EVAL_BATCH)
    return xtts, [(r.latents, speaker) for r in requests]


def old_vocoding(xtts, items) -> list:
    """The evaluation's vocoding before (evaluate/synthesis.py up to issue 33's follow-up)."""
    import numpy as np
    import torch

    out = []
    with torch.no_grad():
        for latents, speaker in items:
            audio = xtts.hifigan_decoder(torch.stack(latents)[None], g=speaker)
            out.append(audio.detach().cpu().numpy().astype(np.float32).reshape(-1))
    return out


def new_vocoding(xtts, items) -> list:
    from xtts_ft.inference.vocoding import vocode_all

    return [audio for audio, _seconds in vocode_all(xtts.hifigan_decoder, items)]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=10, help="Samples per evaluation (the demo: 8 sentences + 2 clips).")
    p.add_argument("--codes", type=int, default=100, help="Audio codes per sample (the demo's max_new_tokens).")
    p.add_argument("--rounds", type=int, default=2, help="Old/new pairs, alternating.")
    p.add_argument("--threads", type=int, default=0, help="The trainer's torch threads (0: torch's default).")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--base-model", type=Path, help="A tiny model folder to use (default: one written to a temp dir).")
    args = p.parse_args(argv)
    import os

    import numpy as np
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="eval_speed_") as tmp:
        start = time.perf_counter()
        xtts, items = decode_samples(Path(tmp), args.samples, args.codes, args.seed, args.base_model)
        seconds = sum(len(latents) for latents, _ in items) * 1024 / 22050
        print(f"{args.samples} samples, {seconds:.1f} s of audio, decoded in {time.perf_counter() - start:.1f} s "
              f"(model build included); trainer threads {torch.get_num_threads()}, "
              f"{len(os.sched_getaffinity(0))} cores, load {os.getloadavg()[0]:.1f}", flush=True)
        totals = {"old": 0.0, "new": 0.0}
        worst = 0.0
        for r in range(args.rounds):
            t = time.perf_counter()
            old = old_vocoding(xtts, items)
            old_s = time.perf_counter() - t
            t = time.perf_counter()
            new = new_vocoding(xtts, items)
            new_s = time.perf_counter() - t
            totals["old"] += old_s
            totals["new"] += new_s
            worst = max([worst] + [float(np.abs(a - b).max()) for a, b in zip(old, new)])
            print(f"round {r + 1}: old {old_s:.2f} s, new {new_s:.2f} s, load {os.getloadavg()[0]:.1f}", flush=True)
        print(f"vocoding {args.samples} samples x {args.rounds} rounds: old {totals['old']:.2f} s, "
              f"new {totals['new']:.2f} s, ratio {totals['old'] / totals['new']:.2f}x; "
              f"max |old - new| {worst:.2e}", flush=True)


if __name__ == "__main__":
    main()

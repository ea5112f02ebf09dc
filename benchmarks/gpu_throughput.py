"""Throughput and memory of the XTTS-v2 GPT per precision and batch size, side by side in one run.

    python benchmarks/gpu_throughput.py                    # full-size GPT on the GPU at hand
    python benchmarks/gpu_throughput.py --size small       # a small GPT on CPU (CI checks it runs)
    python benchmarks/gpu_throughput.py --gradient-checkpointing   # GPT blocks recomputed in backward

Builds the XTTS GPT with random weights (speed does not depend on them), feeds synthetic text
tokens, DVAE codes and conditioning mels of the longest allowed clip, and times real training
steps: data (host->device copy), forward, backward, optimizer, split with synchronisation. Prints
samples/s, peak memory, achieved model FLOP/s against the card's peak, and bf16/fp16 vs fp32 ratios.
Only the GPT is built: a training run also holds the frozen DVAE and HiFiGAN decoder on the GPU
unless ``training.offload_frozen`` is set (see docs/gpu_benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, when run as a script
from xtts_ft.config import PrecisionConfig  # noqa: E402
from xtts_ft.train.precision import PrecisionPolicy, cuda_bf16_supported, make_scaler  # noqa: E402

FULL = dict(layers=30, model_dim=1024, heads=16, max_text_tokens=402, max_mel_tokens=605, max_prompt_tokens=70,
            number_text_tokens=8000, num_audio_tokens=8194)
SMALL = dict(layers=2, model_dim=128, heads=4, max_text_tokens=64, max_mel_tokens=80, max_prompt_tokens=70,
             number_text_tokens=1000, num_audio_tokens=258)
# Dense bf16/fp16 tensor-core peaks (TFLOP/s) of the cards users rent; fp32 peaks are far lower.
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0, "L40": 181.0, "L4": 121.0, "A10G": 70.0,
               "T4": 65.0, "V100": 125.0}


def peak_tflops(device_name: str):
    """The card's dense peak from its name; a model must be a whole word ('L4' is not 'L40S')."""
    for model, peak in PEAK_TFLOPS.items():
        if re.search(rf"(?<![A-Za-z0-9]){model}(?![A-Za-z0-9])", device_name):
            return peak
    return None


def runnable_precisions(precisions: list[str], device: torch.device) -> list[str]:
    """``precisions`` less bf16 on a GPU without native bf16 (T4, V100: torch would emulate it, slowly)."""
    if "bf16" in precisions and device.type == "cuda" and not cuda_bf16_supported(device):
        print("bf16: no native bf16 on this card (compute capability < 8.0; torch would emulate it), skipped")
        return [p for p in precisions if p != "bf16"]
    return list(precisions)


def build_gpt(size: dict, device: torch.device):
    from TTS.tts.layers.xtts.gpt import GPT

    gpt = GPT(
        layers=size["layers"], model_dim=size["model_dim"], heads=size["heads"],
        max_text_tokens=size["max_text_tokens"], max_mel_tokens=size["max_mel_tokens"],
        max_prompt_tokens=size["max_prompt_tokens"], number_text_tokens=size["number_text_tokens"],
        num_audio_tokens=size["num_audio_tokens"], start_audio_token=size["num_audio_tokens"] - 2,
        stop_audio_token=size["num_audio_tokens"] - 1, start_text_token=size["number_text_tokens"] - 1,
        stop_text_token=0, use_perceiver_resampler=True, code_stride_len=1024,
    )
    return gpt.to(device).train()


def synthetic_batch(size: dict, batch: int, text_len: int, codes_len: int, cond_frames: int):
    text = torch.randint(3, size["number_text_tokens"] - 2, (batch, text_len), dtype=torch.int32)
    codes = torch.randint(0, size["num_audio_tokens"] - 2, (batch, codes_len))
    cond = torch.randn(batch, 1, 80, cond_frames)
    wav_len = torch.full((batch,), codes_len * 1024)
    cond_idxs = torch.tensor([[0, cond_frames * 256]] * batch)
    return text, torch.full((batch,), text_len), codes, wav_len, cond, cond_idxs


def loader_throughput(size: dict, batch: int, workers: int, batches: int, text_len: int, codes_len: int) -> float:
    """Samples/s the project's real training DataLoader delivers for clips of the benchmark's length.

    Writes ``2 * batch`` clips (PCM16 WAV of ``codes_len`` x 1024 samples with cached DVAE codes) to a
    temporary folder and times ``make_loader`` over ``ClipDataset`` (the code cache path the trainer
    uses: the prompt crop is read from disk, codes from .npy), collation included. Workers prefetch in
    parallel with the GPU, so the loader stalls training only when this rate is below the GPU's.
    """
    import tempfile

    import numpy as np
    import soundfile as sf

    from xtts_ft.train.data import Clip, ClipDataset, make_loader
    from xtts_ft.train.sampler import ItemKey

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        clips, code_paths = [], []
        for i in range(2 * batch):
            wav = Path(tmp) / f"clip{i}.wav"
            sf.write(wav, (rng.standard_normal(codes_len * 1024) * 0.1).astype(np.float32), 22050, subtype="PCM_16")
            codes = Path(tmp) / f"clip{i}.npy"
            np.save(codes, rng.integers(0, size["num_audio_tokens"] - 2, codes_len).astype(np.int16))
            tokens = tuple(int(t) for t in rng.integers(3, size["number_text_tokens"] - 2, text_len))
            clips.append(Clip(wav, "", "bench", tokens, codes_len * 1024, ""))
            code_paths.append(codes)
        dataset = ClipDataset(clips, sample_rate=22050, cond_min_s=2.0, cond_max_s=6.0, seed=0, train=True,
                              code_paths=code_paths)
        plan = [[ItemKey((b * batch + j) % len(clips), 0, b, j, 0) for j in range(batch)] for b in range(batches + 2)]
        loader = make_loader(dataset, plan, num_workers=workers, base_seed=0, pin_memory=False)
        it = iter(loader)
        next(it), next(it)  # worker start-up is paid once per run, not per step
        start = time.perf_counter()
        for _ in range(batches):
            next(it)
        seconds = time.perf_counter() - start
        del it, loader
    return batches * batch / seconds


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(gpt, size, device, precision: str, batch: int, steps: int, text_len: int, codes_len: int) -> dict:
    dtype = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    autocast = torch.amp.autocast(device.type, dtype=dtype) if dtype else nullcontext()
    # the training loop's scaler (init scale 1024 from the config schema, not torch's 65536)
    scaler = make_scaler(PrecisionPolicy(precision, device.type), PrecisionConfig())
    opt = torch.optim.AdamW(gpt.parameters(), lr=1e-6, fused=device.type == "cuda")
    host = synthetic_batch(size, batch, text_len, codes_len, cond_frames=258)
    if device.type == "cuda":
        host = [t.pin_memory() for t in host]
        torch.cuda.reset_peak_memory_stats()
    parts = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    for i in range(steps + 2):  # two warm-up steps are not timed
        t0 = time.perf_counter()
        text, text_lens, codes, wav_len, cond, cond_idxs = (t.to(device, non_blocking=True) for t in host)
        sync(device)
        t1 = time.perf_counter()
        with autocast:
            # the GPT divides cond_idxs in place; on CPU .to() returns the same tensor, so hand it a copy
            loss_text, loss_mel, _ = gpt(text, text_lens, codes, wav_len, cond_mels=cond, cond_idxs=cond_idxs.clone())
            loss = loss_text * 0.01 + loss_mel
        sync(device)
        t2 = time.perf_counter()
        scaler.scale(loss).backward()
        sync(device)
        t3 = time.perf_counter()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(gpt.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        sync(device)
        t4 = time.perf_counter()
        if i >= 2:
            for k, dt in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                parts[k] += dt
    step_s = sum(parts.values()) / steps
    n_params = sum(p.numel() for p in gpt.parameters())
    tokens = batch * (text_len + codes_len + 32)  # + perceiver conditioning latents
    flops = 6 * n_params * tokens  # forward + backward, dense approximation
    return {
        "precision": precision, "batch": batch, "samples_per_s": batch / step_s, "step_ms": 1000 * step_s,
        **{f"{k}_pct": 100 * v / steps / step_s for k, v in parts.items()},
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan"),
        "tflops": flops / step_s / 1e12, "loss": loss.item(),
        "loss_scale": scaler.get_scale() if scaler.is_enabled() else None,
    }


def training_rows(args, size: dict, size_name: str, device: torch.device, batches: list[int], precisions: list[str],
                  steps: int, text_len: int, codes_len: int) -> list[dict]:
    """Time real training steps of the GPT per precision and batch size; print one line per row."""
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    peak = peak_tflops(name)
    torch.manual_seed(0)
    gpt = build_gpt(size, device)
    if args.gradient_checkpointing:
        from xtts_ft.train.memory import enable_gradient_checkpointing

        enable_gradient_checkpointing(gpt)
    print(f"device {name}; GPT {size_name}: {sum(p.numel() for p in gpt.parameters()) / 1e6:.1f} M params; "
          f"text {text_len} tokens, audio {codes_len} codes (longest clip); {steps} timed steps; "
          f"gradient checkpointing {'on' if args.gradient_checkpointing else 'off'}")
    rows = []
    for precision in runnable_precisions(precisions, device):
        for batch in batches:
            row = None
            try:
                row = measure(gpt, size, device, precision, batch, steps, text_len, codes_len)
            except torch.OutOfMemoryError:
                print(f"{precision} batch {batch}: out of memory")
            if row is None:  # outside the except: its traceback no longer holds the failed step's tensors
                gpt.zero_grad(set_to_none=True)
                torch.cuda.empty_cache()
                continue
            row["gradient_checkpointing"] = args.gradient_checkpointing
            rows.append(row)
            mfu = f"{100 * row['tflops'] / peak:5.1f}% of peak" if peak else "peak unknown"
            print(f"{precision:>4} b{batch:<3} {row['samples_per_s']:8.2f} samples/s  {row['step_ms']:8.1f} ms/step  "
                  f"data {row['data_pct']:4.1f}% fwd {row['forward_pct']:4.1f}% bwd {row['backward_pct']:4.1f}% "
                  f"opt {row['optimizer_pct']:4.1f}%  peak {row['peak_mem_gib']:6.2f} GiB  "
                  f"{row['tflops']:7.2f} TFLOP/s ({mfu})")
    best = {p: max((r["samples_per_s"] for r in rows if r["precision"] == p), default=None) for p in precisions}
    if best.get("fp32"):
        for p in ("fp16", "bf16"):
            if best.get(p):
                print(f"{p} / fp32 best samples/s: {best[p] / best['fp32']:.2f}x")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["full", "small"], default=None, help="full on GPU, small on CPU by default")
    parser.add_argument("--batches", default=None, help="comma-separated batch sizes")
    parser.add_argument("--precisions", default=None, help="comma-separated: fp32,fp16,bf16")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="recompute GPT block activations in backward (training.gradient_checkpointing)")
    parser.add_argument("--loader-workers", type=int, default=2,
                        help="worker processes for the data-loader measurement (training.num_workers; 0 = none)")
    parser.add_argument("--loader-only", action="store_true",
                        help="only measure the data loader (no model is built; works for --size full on a CPU)")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    size_name = args.size or ("full" if device.type == "cuda" else "small")
    size = FULL if size_name == "full" else SMALL
    batches = [int(b) for b in (args.batches or ("4,8,16" if device.type == "cuda" else "2,4")).split(",")]
    precisions = (args.precisions or ("fp32,fp16,bf16" if device.type == "cuda" else "fp32,bf16")).split(",")
    steps = args.steps or (10 if device.type == "cuda" else 3)
    text_len, codes_len = (size["max_text_tokens"] // 2, size["max_mel_tokens"] - 5)
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    rows = [] if args.loader_only else training_rows(args, size, size_name, device, batches, precisions, steps,
                                                     text_len, codes_len)
    loader_batch = max(batches)
    loader_rate = loader_throughput(size, loader_batch, args.loader_workers, steps * 3, text_len, codes_len)
    fastest = max((r["samples_per_s"] for r in rows), default=None)
    need = f"; the fastest training row above needs {100 * fastest / loader_rate:.1f}% of it" if fastest else ""
    print(f"data loader (real ClipDataset + collate, {args.loader_workers} workers, batch {loader_batch}, "
          f"longest clips): {loader_rate:.1f} samples/s{need}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"device": name, "size": size_name, "rows": rows,
                       "loader": {"workers": args.loader_workers, "batch": loader_batch,
                                  "samples_per_s": loader_rate}}, f, indent=2)


if __name__ == "__main__":
    main()

"""Throughput and memory of the XTTS-v2 GPT's training step: coqui's forward and ours side by side in one run.

    python benchmarks/gpu_throughput.py                    # full-size GPT on the GPU at hand (+ compiled path)
    python benchmarks/gpu_throughput.py --size small       # a small GPT on CPU (CI checks it runs)
    python benchmarks/gpu_throughput.py --size full --threads 2 --steps 2 --batches 2 --precisions fp32
    python benchmarks/gpu_throughput.py --gradient-checkpointing   # GPT blocks recomputed in backward

Builds the XTTS GPT with random weights (speed does not depend on them) and times real training
steps on synthetic text tokens, DVAE codes and conditioning mels: data (host->device copy),
forward, backward, optimizer, split with synchronisation. Each batch shape, precision and batch
size runs every training forward in turn (``--paths``): ``coqui`` (coqui's ``GPT.forward`` with the
prompt-masked mel loss: what training ran before ``training.gpt_forward: fast``), ``fast``
(``xtts_ft/gpt_forward.py``) and, with ``--compile`` on (auto: on a GPU), ``compiled`` (its blocks
under torch.compile as ``training.compile`` runs them; compile time is printed and not timed).
Batch shapes (``--lengths``): ``equal``, every row the longest clip the model takes; ``padded``,
clips with the length spread of datasets/amharic_demo's 66 sentences, batched by the training
sampler's length bucketing and padded to each batch's longest row. Prints samples/s, peak memory,
achieved model FLOP/s (real positions only) against the card's peak, the new paths' speed-up over
coqui's, and bf16/fp16 vs fp32 ratios. Only the GPT is built: a training run also holds the frozen
DVAE and HiFiGAN decoder on the GPU unless ``training.offload_frozen`` is set (see docs/gpu_benchmarks.md).
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the repository, when run as a script
from xtts_ft.config import PrecisionConfig  # noqa: E402
from xtts_ft.gpt_compile import CompiledBlocks, compile_enabled, longest_row  # noqa: E402
from xtts_ft.gpt_forward import fast_gpt_losses  # noqa: E402
from xtts_ft.model import coqui_gpt_losses  # noqa: E402
from xtts_ft.train.precision import PrecisionPolicy, cuda_bf16_supported, make_scaler  # noqa: E402

FULL = dict(layers=30, model_dim=1024, heads=16, max_text_tokens=402, max_mel_tokens=605, max_prompt_tokens=70,
            number_text_tokens=8000, num_audio_tokens=8194)
SMALL = dict(layers=2, model_dim=128, heads=4, max_text_tokens=64, max_mel_tokens=80, max_prompt_tokens=70,
             number_text_tokens=1000, num_audio_tokens=258)
SAMPLE_RATE = 22050  # of the clips (XTTS-v2's DVAE codes: one per 1024 samples)
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
        print("bf16: no native bf16 on this card (compute capability < 8.0; torch would emulate it), skipped", flush=True)
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
    """Every row the same clip length (``text_len`` tokens, ``codes_len`` codes): the "equal" rows."""
    return spread_batch(size, [text_len] * batch, [codes_len * 1024] * batch, cond_frames)


def spread_batch(size: dict, text_lens: list[int], wav_lens: list[int], cond_frames: int, seed: int = 0):
    """A collated batch of these rows: text and codes padded to the longest row, as ``collate`` pads them."""
    g = torch.Generator().manual_seed(seed)
    batch = len(text_lens)
    codes_len = max(-(-w // 1024) for w in wav_lens)
    text = torch.randint(3, size["number_text_tokens"] - 2, (batch, max(text_lens)), dtype=torch.int32, generator=g)
    codes = torch.randint(0, size["num_audio_tokens"] - 2, (batch, codes_len), generator=g)
    cond = torch.randn(batch, 1, 80, cond_frames, generator=g)
    cond_idxs = torch.tensor([[0, min(w, cond_frames * 256)] for w in wav_lens])
    return text, torch.tensor(text_lens), codes, torch.tensor(wav_lens), cond, cond_idxs


def demo_spread() -> list[tuple[int, float]]:
    """(text characters, seconds) of the 66 clips of datasets/amharic_demo: a real spread of sentence lengths."""
    import soundfile as sf

    root = REPO / "datasets" / "amharic_demo"
    rows = [line.split("|") for line in (root / "metadata.csv").read_text(encoding="utf-8").splitlines()[1:]]
    return [(len(text), sf.info(str(root / audio)).duration) for audio, text, *_ in rows]


def padded_batches(size: dict, batch: int, count: int, cond_frames: int, seed: int = 0) -> list[tuple]:
    """``count`` batches of clips drawn from :func:`demo_spread` and batched as training batches them.

    The clips are the demo spread repeated (each copy's length jittered by up to +-10 %) until the
    sampler's length-sorting window (``BUCKET_BATCHES`` batches) is full; ``ResumableBatchSampler`` with
    length bucketing on orders them, so each batch holds clips of similar length, padded to its longest.
    Lengths beyond the model's maxima are scaled down with the whole spread (the small GPT's 80 codes).
    """
    import random

    from xtts_ft.train.sampler import BUCKET_BATCHES, ResumableBatchSampler

    rng = random.Random(seed)
    spread = demo_spread()
    max_s = (size["max_mel_tokens"] - 5) * 1024 / SAMPLE_RATE
    scale = min(1.0, max_s / (1.1 * max(s for _, s in spread)),
                (size["max_text_tokens"] - 2) / (1.1 * max(t for t, _ in spread)))
    clips = []
    while len(clips) < batch * BUCKET_BATCHES:
        for chars, seconds in spread:
            jitter = rng.uniform(0.9, 1.1)
            clips.append((max(2, round(chars * scale * jitter)), max(1024, round(seconds * scale * jitter * SAMPLE_RATE))))
    sampler = ResumableBatchSampler([w for _, w in clips], batch, seed, bucketing=True)
    order = sampler.epoch_batches(0)[:count]
    return [spread_batch(size, [clips[i][0] for i in rows], [clips[i][1] for i in rows], cond_frames, seed=n)
            for n, rows in enumerate(order)]


def real_tokens(host: tuple, cond: int = 32) -> int:
    """Positions that carry a clip (conditioning latents + text + audio), padding not counted."""
    _, text_lens, _, wav_lens, _, _ = host
    return int((text_lens + 2).sum() + ((wav_lens + 1023) // 1024 + 4).sum()) + cond * len(text_lens)


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


PATHS = {"coqui": "coqui's GPT.forward (today's training forward)", "fast": "xtts_ft/gpt_forward.py, eager",
         "compiled": "xtts_ft/gpt_forward.py, blocks under torch.compile (training.compile)"}


def path_forward(path: str, gpt):
    """(losses function, compiled-blocks runner or None) of a training forward path."""
    if path == "coqui":
        return coqui_gpt_losses, None
    runner = CompiledBlocks(longest_row(gpt)) if path == "compiled" else None
    return (lambda g, *args, **kw: fast_gpt_losses(g, *args, **kw, runner=runner)), runner


def measure(gpt, device, precision: str, batches: list[tuple], warmup: int, path: str) -> dict:
    """Time ``len(batches) - warmup`` training steps (data, forward, backward, optimizer) of one path."""
    dtype = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    autocast = torch.amp.autocast(device.type, dtype=dtype) if dtype else nullcontext()
    # the training loop's scaler (init scale 1024 from the config schema, not torch's 65536)
    scaler = make_scaler(PrecisionPolicy(precision, device.type), PrecisionConfig())
    opt = torch.optim.AdamW(gpt.parameters(), lr=1e-6, fused=device.type == "cuda")
    losses, runner = path_forward(path, gpt)
    if device.type == "cuda":
        batches = [tuple(t.pin_memory() for t in host) for host in batches]
        torch.cuda.reset_peak_memory_stats()
    parts = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    compile_timed = tokens = 0
    for i, host in enumerate(batches):  # the first ``warmup`` steps are not timed
        compiled_before = runner.compile_seconds if runner else 0.0
        t0 = time.perf_counter()
        text, text_lens, codes, wav_len, cond, cond_idxs = (t.to(device, non_blocking=True) for t in host)
        sync(device)
        t1 = time.perf_counter()
        with autocast:
            # the GPT divides cond_idxs in place; on CPU .to() returns the same tensor, so hand it a copy
            loss_text, loss_mel = losses(gpt, text, text_lens, codes, wav_len, cond, cond_idxs.clone())
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
        if i >= warmup:
            compiled = (runner.compile_seconds if runner else 0.0) - compiled_before  # a new length bucket
            compile_timed += compiled
            for k, dt in zip(parts, (t1 - t0, t2 - t1 - compiled, t3 - t2, t4 - t3)):
                parts[k] += dt
            tokens += real_tokens(host)
    steps = len(batches) - warmup
    step_s = sum(parts.values()) / steps
    n_params = sum(p.numel() for p in gpt.parameters())
    samples = sum(len(host[1]) for host in batches[warmup:])
    return {
        "path": path, "precision": precision, "batch": len(batches[0][1]), "samples_per_s": samples / steps / step_s,
        "step_ms": 1000 * step_s, **{f"{k}_pct": 100 * v / steps / step_s for k, v in parts.items()},
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan"),
        "tflops": 6 * n_params * tokens / steps / step_s / 1e12,  # forward + backward, dense, real positions only
        "loss": loss.item(), "loss_scale": scaler.get_scale() if scaler.is_enabled() else None,
        "compile_s": runner.compile_seconds if runner else 0.0, "compile_in_timed_s": compile_timed,
    }


def rate(samples_per_s: float) -> str:
    """8 characters: two decimals, four below 1 (a full-size GPT on a CPU)."""
    return f"{samples_per_s:8.2f}" if samples_per_s >= 1 else f"{samples_per_s:8.4f}"


def step_batches(size: dict, lengths: str, batch: int, count: int, text_len: int, codes_len: int) -> list[tuple]:
    if lengths == "equal":
        return [synthetic_batch(size, batch, text_len, codes_len, cond_frames=258)] * count
    return padded_batches(size, batch, count, cond_frames=258)


def training_rows(args, size: dict, size_name: str, device: torch.device, batches: list[int], precisions: list[str],
                  steps: int, text_len: int, codes_len: int) -> list[dict]:
    """Time real training steps of the GPT per batch shape, precision, batch size and path; print one line per row."""
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    peak = peak_tflops(name)
    torch.manual_seed(0)
    gpt = build_gpt(size, device)
    if args.gradient_checkpointing:
        from xtts_ft.train.memory import enable_gradient_checkpointing

        enable_gradient_checkpointing(gpt)
    print(f"device {name}; GPT {size_name}: {sum(p.numel() for p in gpt.parameters()) / 1e6:.1f} M params; "
          f"equal: every row text {text_len} tokens, audio {codes_len} codes (longest clip); padded: clips of "
          f"datasets/amharic_demo's length spread, length-bucketed as the sampler does; {steps} timed steps after "
          f"{args.warmup} warm-up; gradient checkpointing {'on' if args.gradient_checkpointing else 'off'}; "
          f"torch threads {torch.get_num_threads()}", flush=True)
    for path in args.paths:
        print(f"  {path}: {PATHS[path]}", flush=True)
    rows = []
    for lengths in args.lengths:
        for precision in runnable_precisions(precisions, device):
            for batch in batches:
                host = step_batches(size, lengths, batch, args.warmup + steps, text_len, codes_len)
                by_path = {}
                for path in args.paths:
                    row = None
                    try:
                        row = measure(gpt, device, precision, host, args.warmup, path)
                    except torch.OutOfMemoryError:
                        print(f"{lengths} {precision} batch {batch} {path}: out of memory", flush=True)
                    if row is None:  # outside the except: its traceback no longer holds the failed step's tensors
                        gpt.zero_grad(set_to_none=True)
                        torch.cuda.empty_cache()
                        continue
                    row.update(lengths=lengths, gradient_checkpointing=args.gradient_checkpointing)
                    rows.append(row)
                    if args.json:  # again after each row: a run stopped at its time limit keeps the rows it finished
                        write_results(args.json, name, size_name, rows)
                    by_path[path] = row
                    mfu = f"{100 * row['tflops'] / peak:5.1f}% of peak" if peak else "peak unknown"
                    compiled = f"  (compiling {row['compile_s']:.1f} s, not timed)" if row["compile_s"] else ""
                    print(f"{lengths:>6} {precision:>4} b{batch:<3} {path:>8} {rate(row['samples_per_s'])} samples/s "
                          f"{row['step_ms']:8.1f} ms/step  data {row['data_pct']:4.1f}% fwd {row['forward_pct']:4.1f}% "
                          f"bwd {row['backward_pct']:4.1f}% opt {row['optimizer_pct']:4.1f}%  peak "
                          f"{row['peak_mem_gib']:6.2f} GiB  {row['tflops']:7.2f} TFLOP/s ({mfu}){compiled}", flush=True)
                if "coqui" in by_path:
                    base = by_path["coqui"]["samples_per_s"]
                    ratios = ", ".join(f"{p} {r['samples_per_s'] / base:.2f}x" for p, r in by_path.items() if p != "coqui")
                    if ratios:
                        print(f"{'':>6} {precision:>4} b{batch:<3} against coqui: {ratios}", flush=True)
    for path in args.paths:
        best = {p: max((r["samples_per_s"] for r in rows if r["precision"] == p and r["path"] == path), default=None)
                for p in precisions}
        if best.get("fp32"):
            for p in ("fp16", "bf16"):
                if best.get(p):
                    print(f"{p} / fp32 best samples/s ({path}): {best[p] / best['fp32']:.2f}x", flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
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
    parser.add_argument("--paths", default=None,
                        help="comma-separated training forwards: coqui (today's), fast, compiled (default: coqui,fast "
                             "and compiled where --compile is on)")
    parser.add_argument("--compile", choices=["auto", "on", "off"], default="auto",
                        help="add the compiled path (training.compile; auto: on a GPU)")
    parser.add_argument("--lengths", default="equal,padded",
                        help="comma-separated batch shapes: equal (every row the longest clip), padded (real spread)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 2 on a GPU, 1 on CPU)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (keep it low on a shared CPU)")
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    size_name = args.size or ("full" if device.type == "cuda" else "small")
    size = FULL if size_name == "full" else SMALL
    batches = [int(b) for b in (args.batches or ("4,8,16" if device.type == "cuda" else "2,4")).split(",")]
    precisions = (args.precisions or ("fp32,fp16,bf16" if device.type == "cuda" else "fp32,bf16")).split(",")
    steps = args.steps or (10 if device.type == "cuda" else 3)
    args.warmup = args.warmup if args.warmup is not None else (2 if device.type == "cuda" else 1)
    args.lengths = args.lengths.split(",")
    compiled = ["compiled"] if compile_enabled(args.compile, device) else []
    args.paths = args.paths.split(",") if args.paths else ["coqui", "fast", *compiled]
    unknown = [p for p in args.paths if p not in PATHS] + [x for x in args.lengths if x not in ("equal", "padded")]
    if unknown:
        parser.error(f"unknown path or batch shape: {', '.join(unknown)}")
    text_len, codes_len = (size["max_text_tokens"] // 2, size["max_mel_tokens"] - 5)
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    rows = [] if args.loader_only else training_rows(args, size, size_name, device, batches, precisions, steps,
                                                     text_len, codes_len)
    loader_batch = max(batches)
    loader_rate = loader_throughput(size, loader_batch, args.loader_workers, steps * 3, text_len, codes_len)
    fastest = max((r["samples_per_s"] for r in rows), default=None)
    need = f"; the fastest training row above needs {100 * fastest / loader_rate:.1f}% of it" if fastest else ""
    print(f"data loader (real ClipDataset + collate, {args.loader_workers} workers, batch {loader_batch}, "
          f"longest clips): {loader_rate:.1f} samples/s{need}", flush=True)
    if args.json:
        write_results(args.json, name, size_name, rows,
                      {"workers": args.loader_workers, "batch": loader_batch, "samples_per_s": loader_rate})


def write_results(path: str, device_name: str, size_name: str, rows: list[dict], loader: dict | None = None) -> None:
    """The rows so far (and the loader's rate, once measured) as JSON at ``path``, replaced in one rename."""
    partial = Path(path + ".partial")
    partial.write_text(json.dumps({"device": device_name, "peak_tflops": peak_tflops(device_name), "size": size_name,
                                   "rows": rows, "loader": loader}, indent=2), encoding="utf-8")
    partial.replace(path)


if __name__ == "__main__":
    main()

"""What each ``training.trainable`` option costs: memory and step time of all / freeze / lora, side by side.

    python benchmarks/trainable_cost.py                        # full-size XTTS-v2 GPT on the CPU (~10 GB RAM)
    python benchmarks/trainable_cost.py --size small --steps 1 # a small GPT (the tests run it)
    python benchmarks/trainable_cost.py --device cuda           # the same on a GPU (adds the allocator's peak)

Each option is measured in a fresh child process (so its peak RSS is its own): the GPT with random
weights (speed and memory do not depend on them), ``apply_trainable`` with the config's defaults
(``frozen_blocks`` 15 of 30, LoRA rank 16 on c_attn/c_proj/c_fc), the project's AdamW
(``build_optimizer``) with the row keeper attached, then real training steps on a synthetic batch
(forward, backward, clip, optimizer step), the first one untimed. Reported: weights that train,
the optimizer's state (AdamW keeps two fp32 moments per trained weight), the process's peak RSS,
the median step time in wall and in CPU seconds (all threads; on a shared machine the steadier of
the two), and on a GPU the allocator's peak. Only the GPT is built: a run also holds the frozen
DVAE, HiFiGAN decoder and speaker encoder, the same for every option.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, when run as a script
from xtts_ft.config import TrainingConfig  # noqa: E402
from xtts_ft.train.schedule import build_optimizer  # noqa: E402
from xtts_ft.train.trainable import apply_trainable  # noqa: E402

MODES = ("all", "freeze", "lora")


def _gpu_throughput():
    """The GPT builder and synthetic batch of benchmarks/gpu_throughput.py (a script beside this one)."""
    spec = importlib.util.spec_from_file_location("gpu_throughput", Path(__file__).resolve().parent / "gpu_throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
BASE_VOCAB = {"full": 6681, "small": 800}  # XTTS-v2's own vocabulary; the rest of the rows are "new"


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _tensor_mb(tensors) -> float:
    return sum(t.numel() * t.element_size() for t in tensors) / 2**20


def measure(mode: str, args) -> dict:
    """One option in this process: build, apply, train ``args.steps`` timed steps."""
    gt = _gpu_throughput()
    size = gt.FULL if args.size == "full" else gt.SMALL
    device = torch.device(args.device)
    torch.manual_seed(0)
    gpt = gt.build_gpt(size, device)
    built_rss = _rss_mb()
    defaults = TrainingConfig()
    tcfg = dataclasses.replace(defaults, trainable=mode, lr=1e-5,
                               frozen_blocks=min(defaults.frozen_blocks, size["layers"] // 2))
    setup = apply_trainable(gpt, tcfg, BASE_VOCAB[args.size])
    optimizer = build_optimizer(gpt, tcfg, device)
    setup.attach(optimizer)
    trained = [p for g in optimizer.param_groups for p in g["params"]]
    kept = setup.kept_rows.count if setup.kept_rows is not None else 0
    host = gt.synthetic_batch(size, args.batch, args.text_len, args.codes_len, cond_frames=args.cond_frames)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times, cpu_times = [], []
    for i in range(args.steps + 1):  # the first step (allocations, optimizer state creation) is not timed
        gt.sync(device)
        t0, c0 = time.perf_counter(), time.process_time()
        text, text_lens, codes, wav_len, cond, cond_idxs = (t.to(device) for t in host)
        loss_text, loss_mel, _ = gpt(text, text_lens, codes, wav_len, cond_mels=cond, cond_idxs=cond_idxs.clone())
        (loss_text * 0.01 + loss_mel).backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        gt.sync(device)
        if i:
            times.append(time.perf_counter() - t0)
            cpu_times.append(time.process_time() - c0)
    state = [t for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t) and t.numel() > 1]
    return {
        "mode": mode,
        "gpt_params_m": sum(p.numel() for n, p in gpt.named_parameters() if ".lora_" not in n) / 1e6,
        "trained_m": (sum(p.numel() for p in trained) - kept) / 1e6,
        "optimizer_state_mb": _tensor_mb(state),
        "rss_after_build_mb": built_rss,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "step_s": statistics.median(times),
        "step_cpu_s": statistics.median(cpu_times),  # CPU seconds of all threads: steadier than wall time under load
        "load_avg_1min": os.getloadavg()[0],  # step times on a shared machine depend on it
        "gpu_peak_mb": torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None,
    }


def _child(mode: str, args) -> dict:
    cmd = [sys.executable, __file__, "--one", mode, "--size", args.size, "--steps", str(args.steps), "--batch",
           str(args.batch), "--text-len", str(args.text_len), "--codes-len", str(args.codes_len), "--cond-frames",
           str(args.cond_frames), "--device", args.device, "--threads", str(args.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        killed = " (killed: out of memory?)" if out.returncode < 0 else ""
        raise SystemExit(f"{mode}: the measurement failed with exit code {out.returncode}{killed}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def print_table(rows: list[dict], args) -> None:
    print(f"training.trainable on the {args.size} GPT, {args.device}, batch {args.batch}, text {args.text_len} "
          f"tokens, {args.codes_len} audio codes, {args.threads} thread(s), median of {args.steps} step(s)")
    head = f"{'option':8} {'trains (M)':>11} {'optimizer MB':>13} {'peak RSS MB':>12} {'step s':>8} {'CPU s':>7}"
    if args.device == "cuda":
        head += f" {'GPU peak MB':>12}"
    print(head)
    first = rows[0]
    for r in rows:
        line = (f"{r['mode']:8} {r['trained_m']:>11.1f} {r['optimizer_state_mb']:>13.0f} {r['peak_rss_mb']:>12.0f} "
                f"{r['step_s']:>8.2f} {r['step_cpu_s']:>7.1f}")
        if r["gpu_peak_mb"] is not None:
            line += f" {r['gpu_peak_mb']:>12.0f}"
        print(line + (f"   x{r['step_cpu_s'] / first['step_cpu_s']:.2f} CPU time of {first['mode']}"
                      if r is not first else ""))
    loads = ", ".join(f"{r['load_avg_1min']:.1f}" for r in rows)
    print(f"(the GPT has {first['gpt_params_m']:.1f} M weights; RSS after building it: "
          f"{first['rss_after_build_mb']:.0f} MB; 1-minute load average at the end of each option: "
          f"{loads} on {os.cpu_count()} cores)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=("full", "small"), default="full")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated options to measure")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per option (after one untimed)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--text-len", type=int, default=24)
    ap.add_argument("--codes-len", type=int, default=40)
    ap.add_argument("--cond-frames", type=int, default=258)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--one", choices=MODES, help=argparse.SUPPRESS)  # a child: measure one option, print JSON
    args = ap.parse_args()
    torch.set_num_threads(args.threads)  # a benchmark script, not an import: it may set the process's threads
    if args.one:
        print(json.dumps(measure(args.one, args)))
        return
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        raise SystemExit(f"--modes: unknown {unknown}; choose from {', '.join(MODES)}")
    rows = [measure(modes[0], args)] if len(modes) == 1 else [_child(m, args) for m in modes]
    print_table(rows, args)
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

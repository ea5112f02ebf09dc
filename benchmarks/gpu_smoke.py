"""GPU smoke test: one command that proves the CUDA, precision and multi-GPU paths; paste its output in an issue.

    python benchmarks/gpu_smoke.py                      # on the GPU machine, from the repository root
    python benchmarks/gpu_smoke.py --base-model DIR     # with the real XTTS-v2 folder (default: a tiny random model)
    python benchmarks/gpu_smoke.py --cpu --quick        # reduced mode on a CPU (the test suite runs this)

Sections (each prints what it measured; a failed check prints FAIL and the run goes on):

1. device: name, compute capability, torch/CUDA versions, native bf16, what ``precision.mode: auto`` picks;
2. training: a short real run (demo dataset, ``batch_size: auto``) in that precision, with the loss-scale trace;
3. memory: the batch-size probe's peak against the real peak of step 1 at the chosen size;
4. resume: the same run stopped half-way and resumed ends with the uninterrupted run's weights;
5. evaluation inputs: the mels and codes evaluation feeds the model equal the ones training builds;
6. stop: SIGTERM to a running ``headless_train.py``: seconds to a saved checkpoint against torchrun's 30 s,
   and the estimated save time of a full-size XTTS-v2 checkpoint on this disk;
7. two GPUs: ``torchrun --nproc_per_node=2 headless_train.py`` when two are visible;
8. throughput: ``benchmarks/gpu_throughput.py`` (full-size GPT per precision and batch size).

Everything is written under ``--out`` (default ``runs/gpu_smoke``); nothing else is touched.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from xtts_ft.cli import default_allocator_settings  # noqa: E402
from xtts_ft.layout import RunLayout  # noqa: E402

RESULTS: list[tuple[str, bool]] = []
PROBE_LINES: list[str] = []


class ProbeLines(logging.Handler):
    """Keeps the batch-size probe's log lines (the trainer logs its choice and peak there)."""

    def emit(self, record: logging.LogRecord) -> None:
        if "batch_size auto:" in record.getMessage():
            PROBE_LINES.append(record.getMessage())


def section(number: int, title: str) -> None:
    print(f"\n## {number}. {title}", flush=True)


def check(name: str, ok: bool, detail: str = "") -> bool:
    RESULTS.append((name, ok))
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    return ok


def smoke_config(args, run_dir: Path, **sets):
    from xtts_ft.config import load_config

    overrides = {
        "run.output_dir": str(run_dir), "run.device": "cpu" if args.cpu else "auto",
        "base_model.source": args.base_model or str(args.out / "tiny_base"),
        "base_model.create_tiny": "false" if args.base_model else "true",
        "precision.mode": args.precision, "training.max_steps": str(args.steps), "training.warmup_steps": "0",
        "evaluation.every_steps": "0", "evaluation.eval_at_start": "false", "evaluation.mcd_clips": "0",
        "checkpoint.every_steps": str(args.steps), "training.num_workers": "0", "training.log_every": "1", **sets,
    }
    return load_config(REPO / "configs" / "demo.yaml", [f"{k}={v}" for k, v in overrides.items()])


def device_section(args) -> torch.device:
    from xtts_ft.train.precision import cuda_bf16_supported, describe_cuda, resolve_precision

    section(1, "device and precision")
    device = torch.device("cpu" if args.cpu or not torch.cuda.is_available() else "cuda", 0)
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, python {platform.python_version()}, "
          f"{torch.cuda.device_count()} GPU(s) visible, PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF')}")
    if device.type == "cuda":
        torch.cuda.set_device(device)
        props = torch.cuda.get_device_properties(device)
        print(f"{describe_cuda(device)}, {props.total_memory / 2**30:.1f} GiB; native bf16: "
              f"{cuda_bf16_supported(device)}; torch.cuda.is_bf16_supported() (counts emulation): "
              f"{torch.cuda.is_bf16_supported()}")
    policy = resolve_precision("auto", device)
    print(f"precision.mode auto -> {policy.name} (GradScaler {'on' if policy.scaler_enabled else 'off'}); "
          f"this smoke test trains in precision.mode {args.precision}")
    return device


def prepared(args):
    """The demo dataset prepared and its vocabulary built once, in OUT/data_run."""
    from xtts_ft.pipeline import run_pipeline

    result = run_pipeline(smoke_config(args, args.out / "data_run"), train_model=False)
    return result


def train_run(args, cfg, prep, *, injector=None):
    """run_training on the prepared data; returns (result, the trained model)."""
    from xtts_ft.base_model import resolve_base_model
    from xtts_ft.model import build_training_model
    from xtts_ft.pipeline import base_vocab_size
    from xtts_ft.train.loop import run_training

    base = resolve_base_model(cfg.base_model)
    built = []

    def factory(*a):
        built.append(build_training_model(*a))
        return built[-1]

    result = run_training(cfg, base=base, vocab_path=prep.vocab_path, base_vocab_size=base_vocab_size(base),
                          train_csv=prep.data_dir / "metadata_train.csv", eval_csv=prep.data_dir / "metadata_eval.csv",
                          run_dir=cfg.run_dir, model_factory=factory, fault_injector=injector)
    return result, built[-1]


def seed_codes(src_run: Path, dst_run: Path) -> None:
    """Start a run dir with the DVAE codes an earlier run computed (the same clips and DVAE)."""
    src = RunLayout(src_run).codes_cache
    if src.is_dir():
        shutil.copytree(src, RunLayout(dst_run).codes_cache, dirs_exist_ok=True)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def training_sections(args, device, prep):
    section(2, "short training run")
    peaks: dict[int, int] = {}

    def step_peaks(step: int):
        if device.type == "cuda":
            if step == 1:
                peaks[1] = torch.cuda.max_memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        return None

    run_dir = args.out / "train"
    shutil.rmtree(run_dir, ignore_errors=True)
    batch = "auto" if device.type == "cuda" else "4"
    cfg = smoke_config(args, run_dir, **{"training.batch_size": batch})
    started = time.perf_counter()
    result, model = train_run(args, cfg, prep, injector=step_peaks)
    lines = [r for r in read_jsonl(RunLayout(run_dir).metrics) if r.get("split") != "eval"]
    print(f"{result.step} steps in {time.perf_counter() - started:.1f} s")
    for r in lines:
        print(f"  step {r['step']:>3}  loss {r['loss']}  loss_scale {r.get('loss_scale')}  precision {r['precision']}  "
              f"grad_norm {r.get('grad_norm')}  skipped {r.get('skipped_steps')}")
    events = read_jsonl(RunLayout(run_dir).events)
    for e in events:
        if e.get("event") in ("rollback", "precision_switch", "stopped"):
            print(f"  event {e}")
    check("training finished with finite losses", result.step == args.steps and bool(lines)
          and all(isinstance(r["loss"], float) for r in lines))
    from xtts_ft.train import checkpoint as ckpt

    size = ckpt.load_training_state(result.last_checkpoint).sampler["batch_size"]

    section(3, "batch-size probe vs real peak")
    if device.type != "cuda":
        print(f"no GPU: nothing to probe (batch {size})")
    else:
        print(PROBE_LINES[-1] if PROBE_LINES else "(the probe logged nothing)")
        total = torch.cuda.get_device_properties(device).total_memory
        step1 = peaks.get(1)
        print(f"step 1 at batch {size}: peak {step1 / 2**30:.2f} GiB of {total / 2**30:.2f} GiB" if step1 else "")
        check("step 1 fits with room to spare", bool(step1) and step1 < 0.95 * total)
    return cfg, size, model


def resume_section(args, prep, size: int, reference):
    from xtts_ft.train.stability import gpt_state_dict

    section(4, "resume equality")
    run_dir = args.out / "resume"
    shutil.rmtree(run_dir, ignore_errors=True)
    half = max(1, args.steps // 2)
    seed_codes(args.out / "train", run_dir)
    first = smoke_config(args, run_dir, **{"training.batch_size": str(size), "training.max_steps": str(half)})
    train_run(args, first, prep)
    result, model = train_run(args, smoke_config(args, run_dir, **{"training.batch_size": str(size)}), prep)
    a, b = gpt_state_dict(reference.gpt), gpt_state_dict(model.gpt)
    diff = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    identical = all(torch.equal(a[k], b[k]) for k in a)
    print(f"stopped at step {half}, resumed to {result.step}: max |weight difference| {diff:.3g}, "
          f"bit-identical {identical} (GPU kernels with atomics may differ in the last bits)")
    check("resumed run matches the uninterrupted one", result.step == args.steps and diff < 1e-3)


def eval_inputs_section(args, cfg, prep, model, device):
    from xtts_ft.model import model_limits
    from xtts_ft.text_settings import TextSettings, make_tokenizer
    from xtts_ft.train.data import ClipDataset, Limits, collate, eval_batches, load_clips
    from xtts_ft.train.evaluation import eval_losses
    from xtts_ft.train.loop import FineTuneRecipe
    from xtts_ft.train.precision import resolve_precision

    section(5, "evaluation inputs vs training inputs")
    tok = make_tokenizer(prep.vocab_path, TextSettings.from_config(cfg))
    limits = Limits(**model_limits(model.xtts))
    clips, _ = load_clips(prep.data_dir / "metadata_eval.csv", tok, "am", limits, progress=False)
    data = ClipDataset(clips, sample_rate=limits.sample_rate, cond_min_s=cfg.training.min_conditioning_s,
                       cond_max_s=cfg.training.max_conditioning_s, seed=0, train=False)  # no code cache: DVAE too
    recipe = types.SimpleNamespace(device=device, model=model.to(device))
    model_inputs = lambda batch, train: FineTuneRecipe.model_inputs(recipe, batch, train=train)  # noqa: E731
    seen = []
    forward = model.forward

    def record(**inputs):
        seen.append({k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)})
        return forward(**inputs)

    policy = resolve_precision(args.precision, device)
    batches = eval_batches(clips, 2, 2)
    model.eval()
    model.forward = record
    try:
        losses = eval_losses(model, data, batches, policy.autocast, model_inputs)
    finally:
        del model.forward
        model.train()
    same = all(torch.equal(s[k], model_inputs(collate([data[key] for key in keys]), train=False)[k])
               for keys, s in zip(batches, seen) for k in ("cond_mels", "audio_codes"))
    print(f"{len(batches)} eval batches in {policy.name}: eval_loss {losses['eval_loss']:.4f}")
    check("eval mels and codes equal training's (built outside autocast)", same and len(seen) == len(batches))


def stop_section(args, prep):
    from xtts_ft.train.save_time import KILL_AFTER_S, checkpoint_bytes, measure_write_rate

    section(6, "stop (SIGTERM) and checkpoint save time")
    run_dir = args.out / "stop"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    shutil.copytree(prep.data_dir, run_dir / "data")
    seed_codes(args.out / "train", run_dir)
    sets = {"run.output_dir": run_dir, "run.device": "cpu" if args.cpu else "auto",
            "base_model.source": args.base_model or args.out / "tiny_base", "precision.mode": args.precision,
            "training.max_steps": 100000, "checkpoint.every_steps": 100000, "training.num_workers": 0,
            "evaluation.every_steps": 0, "evaluation.eval_at_start": "false", "training.log_every": 1}
    cmd = [sys.executable, str(REPO / "headless_train.py"), "--config", str(REPO / "configs" / "demo.yaml")]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        lines = [r for r in read_jsonl(RunLayout(run_dir).metrics) if r.get("split") != "eval"]
        if len(lines) >= 2:
            break
        time.sleep(0.5)
    sent = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        output, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
    seconds = time.perf_counter() - sent
    saved = sorted(RunLayout(run_dir).checkpoints.glob("step_*"))
    print(f"SIGTERM -> exit {proc.returncode} in {seconds:.1f} s (torchrun kills after {KILL_AFTER_S:g} s); "
          f"checkpoint {saved[-1].name if saved else 'none'}")
    if proc.returncode != 0:
        print(output[-3000:])
    check("a stop saves a checkpoint and exits 0 within 30 s", proc.returncode == 0 and bool(saved)
          and seconds < KILL_AFTER_S)
    nbytes = checkpoint_bytes(list(full_size_gpt_params()))
    rate = measure_write_rate(args.out, nbytes=(1024 if not args.quick else 16) * 2**20)
    print(f"full-size XTTS-v2 checkpoint: {nbytes / 1e9:.1f} GB; this disk writes {rate / 1e6:.0f} MB/s fsynced "
          f"-> about {nbytes / rate:.0f} s per save ({'within' if nbytes / rate < KILL_AFTER_S else 'OVER'} "
          f"torchrun's {KILL_AFTER_S:g} s)")


def full_size_gpt_params():
    """The full XTTS-v2 GPT's parameters, on the meta device (shapes only, no memory)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from gpu_throughput import FULL, build_gpt

    with torch.device("meta"):
        return list(build_gpt(FULL, torch.device("meta")).parameters())


def two_gpu_section(args):
    section(7, "two GPUs (torchrun)")
    if args.cpu or torch.cuda.device_count() < 2:
        print(f"skipped: {0 if args.cpu else torch.cuda.device_count()} GPU(s) visible (needs 2)")
        return
    run_dir = args.out / "two_gpus"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(REPO / "headless_train.py"), "--config", str(REPO / "configs" / "demo.yaml"),
           "--max-steps", str(args.steps), "--set", f"run.output_dir={run_dir}", "--set", "run.device=auto",
           "--set", f"base_model.source={args.base_model or args.out / 'tiny_base'}",
           "--set", f"precision.mode={args.precision}", "--set", "evaluation.every_steps=0",
           "--set", "training.warmup_steps=0"]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800)
    print(f"exit {proc.returncode} in {time.perf_counter() - started:.1f} s")
    if proc.returncode != 0:
        print((proc.stdout + proc.stderr)[-3000:])
    check("2-GPU run from a fresh run dir finishes with a checkpoint", proc.returncode == 0 and bool(
        list(RunLayout(run_dir).checkpoints.glob("step_*"))))


def throughput_section(args):
    section(8, "throughput")
    cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_throughput.py")]
    if args.cpu or args.quick:
        cmd += ["--size", "small", "--steps", "1", "--batches", "2", "--precisions", "fp32", "--loader-workers", "0"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, **({"CUDA_VISIBLE_DEVICES": ""} if args.cpu else {})})
    print(proc.stdout.strip())
    check("throughput benchmark ran", proc.returncode == 0, proc.stderr.strip()[-500:] if proc.returncode else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "gpu_smoke", help="work folder")
    parser.add_argument("--base-model", help="an XTTS-v2 folder or repo id (default: a tiny random model)")
    parser.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp16", "fp32"])
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (default 8, --quick 2)")
    parser.add_argument("--cpu", action="store_true", help="run every section on the CPU (reduced mode)")
    parser.add_argument("--quick", action="store_true", help="fewest steps and the small throughput benchmark")
    args = parser.parse_args()
    args.steps = args.steps or (2 if args.quick else 8)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    default_allocator_settings()  # as the real entry points do, before CUDA starts
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    memory_log = logging.getLogger("xtts_ft.train.memory")
    memory_log.setLevel(logging.INFO)
    memory_log.addHandler(ProbeLines())  # section 3 repeats the probe's result
    print(f"gpu_smoke: {' '.join(sys.argv[1:]) or '(defaults)'}; git {git_revision()}")
    device = device_section(args)
    prep = prepared(args)
    cfg, size, model = training_sections(args, device, prep)
    resume_section(args, prep, size, model)
    eval_inputs_section(args, cfg, prep, model, device)
    stop_section(args, prep)
    two_gpu_section(args)
    throughput_section(args)
    failed = [name for name, ok in RESULTS if not ok]
    print(f"\n## summary: {len(RESULTS) - len(failed)} of {len(RESULTS)} checks passed"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def git_revision() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())

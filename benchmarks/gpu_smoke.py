"""GPU smoke test: one command that proves the CUDA, precision and multi-GPU paths; paste its output in an issue.

    python benchmarks/gpu_smoke.py                      # on the GPU machine, from the repository root
    python benchmarks/gpu_smoke.py --base-model DIR     # with the real XTTS-v2 folder (default: a tiny random model)
    python benchmarks/gpu_smoke.py --base-model coqui/XTTS-v2   # the real model from the Hub: a ~2.1 GB download
    python benchmarks/gpu_smoke.py --cpu --quick        # reduced mode on a CPU (the test suite runs this)

Base model: by default a tiny random XTTS written under ``--out`` (no download). ``--base-model DIR``
uses that folder as it is. ``--base-model OWNER/NAME`` (a Hugging Face repo id) downloads the model's
files once into the Hugging Face cache (``HF_HOME``; for coqui/XTTS-v2 about 2.1 GB: model.pth 1.9 GB,
dvae.pth 0.2 GB, config, vocabulary, mel stats, speakers) and needs the network the first time.
Every section, the child processes included, uses that model (``base_model.create_tiny=false``).

Sections (each prints what it measured; a failed check or a section that raises prints FAIL and the
run goes on to the next section):

1. device: name, compute capability, torch/CUDA versions, native bf16, what ``precision.mode: auto`` picks;
2. training: a short real run (demo dataset, ``batch_size: auto``) in that precision, with the loss-scale
   trace; fp16 steps skipped by the scaler are counted and judged (at most one in the short run);
3. memory: the batch-size probe's peak must be at least the real peak of step 1 at the size it chose
   (the probe pads to the longest clip and holds the optimizer state's size, so it may not be lower);
4. resume: the same run (constant LR) stopped half-way and resumed: on the CPU bit-identical to the
   uninterrupted run; on a GPU (kernels with atomics are not bit-reproducible) no further from it, in weights
   and per-step losses, than twice the distance between two uninterrupted runs, measured alongside;
5. evaluation inputs: the DVAE codes evaluation feeds the model equal a fresh fp32 DVAE pass over each
   clip alone (a GPU may differ in at most 1 % of codes: batched and one-clip convolutions pick different
   kernels, and near-tied codes flip), and its conditioning mels equal an fp32 computation outside autocast;
6. memory options: ``offload_frozen`` + gradient checkpointing + an evaluation with sample synthesis,
   speaker similarity and the recogniser (the HiFiGAN decoder moved to the device and back), an
   injected out-of-memory error in step 1 that the micro-batch split absorbs, and (fp16 runs) an
   injected overflow that collapses the loss scale below ``precision.min_scale``: the run must switch
   to bf16 (compute capability >= 8.0) or fp32 and evaluate in it;
7. stop: SIGTERM to a running ``headless_train.py``: seconds to a saved checkpoint against torchrun's 30 s,
   and the estimated save time of a full-size XTTS-v2 checkpoint on this disk;
8. two GPUs: ``torchrun --nproc_per_node=2 headless_train.py`` when two are visible;
9. throughput: ``benchmarks/gpu_throughput.py`` (full-size GPT per precision and batch size; random weights);
10. serving (``smoke_serving.py``): the speech engine on section 2's run: first-chunk latency and aggregate
   real-time factor at 1 and 8 concurrent streams, HiFiGAN under fp16/bf16 against fp32 (CUDA only),
   streamed windows vocoded one by one and in one call (``vocoder_windows.py``), and the decode step (the
   first decoder, the current one, its CUDA-graph replay) and prefill (``decode_step.py``).

Before each child process (sections 7-9) this process drops its models and hands its cached GPU
memory back, and prints what it still holds, so the children get the card.
Everything is written under ``--out`` (default ``runs/gpu_smoke``); nothing else is touched.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

import torch  # noqa: E402
from smoke_common import (  # noqa: E402
    RESULTS,
    NeedsEarlierSection,
    check,
    child_sets,
    needs,
    prepared,
    release_gpu,
    run_section,
    seed_codes,
    smoke_config,
    step_lines,
    train_run,
)
from smoke_serving import serving_section  # noqa: E402

from xtts_ft.checkpoint_store import CheckpointStore  # noqa: E402
from xtts_ft.cli import default_allocator_settings  # noqa: E402
from xtts_ft.config import with_changes  # noqa: E402
from xtts_ft.layout import EVAL_CSV, RunLayout  # noqa: E402
from xtts_ft.run_history import read_events, read_metrics  # noqa: E402

PROBES: list = []  # the BatchChoice of every batch-size probe this process ran
DOWNLOAD_NOTE = ("a folder, or a Hugging Face repo id (downloaded once into the HF cache; coqui/XTTS-v2 is about "
                 "2.1 GB); default: a tiny random model, no download")


def record_probes() -> None:
    """Keep the batch-size probe's result (section 3 compares its peak with the real one)."""
    from xtts_ft.train import memory

    find = memory.find_batch_size

    def recording(*args, **kwargs):
        PROBES.append(find(*args, **kwargs))
        return PROBES[-1]

    memory.find_batch_size = recording  # probe_batch_size looks the name up at call time


def device_section(args) -> torch.device:
    from xtts_ft.train.precision import cuda_bf16_supported, describe_cuda, resolve_precision

    device = torch.device("cpu" if args.cpu or not torch.cuda.is_available() else "cuda", 0)
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, python {platform.python_version()}, "
          f"{torch.cuda.device_count()} GPU(s) visible, PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF')}",
          flush=True)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        props = torch.cuda.get_device_properties(device)
        print(f"{describe_cuda(device)}, {props.total_memory / 2**30:.1f} GiB; native bf16: "
              f"{cuda_bf16_supported(device)}; torch.cuda.is_bf16_supported() (counts emulation): "
              f"{torch.cuda.is_bf16_supported()}", flush=True)
    policy = resolve_precision("auto", device)
    print(f"precision.mode auto -> {policy.name} (GradScaler {'on' if policy.scaler_enabled else 'off'}); "
          f"this smoke test trains in precision.mode {args.precision}; base model: "
          f"{args.base_model or 'a tiny random model'}", flush=True)
    return device


def training_section(args, device, state):
    needs(state, "prep")
    peaks: dict[int, int] = {}

    def step_peaks(step: int):
        if device.type == "cuda":
            if step == 1:
                peaks[1] = torch.cuda.max_memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        return None

    run_dir = args.out / "train"
    shutil.rmtree(run_dir, ignore_errors=True)
    cfg = smoke_config(args, run_dir, **{"training.batch_size": "auto" if device.type == "cuda" else "4"})
    started = time.perf_counter()
    result, model, start = train_run(args, cfg, state["prep"], injector=step_peaks)
    lines = step_lines(run_dir)
    print(f"{result.step} steps in {time.perf_counter() - started:.1f} s", flush=True)
    for r in lines:
        print(f"  step {r['step']:>3}  loss {r['loss']}  loss_scale {r.get('loss_scale')}  precision {r['precision']}  "
              f"grad_norm {r.get('grad_norm')}  skipped {r.get('skipped_steps')}", flush=True)
    for e in read_events(run_dir):
        if e.get("event") in ("rollback", "precision_switch", "stopped"):
            print(f"  event {e}", flush=True)
    check("training finished with finite losses", result.step == args.steps and bool(lines)
          and all(isinstance(r["loss"], float) and math.isfinite(r["loss"]) for r in lines))
    skipped = lines[-1].get("skipped_steps", 0) if lines else 0
    # the scaler starts at precision.init_scale; one overflow back-off at the start is normal, more is not
    check("at most one step skipped by the loss scaler", skipped <= 1, f"{skipped} of {result.step} skipped")
    from xtts_ft.checkpoint_store import CheckpointStore

    state.update(model=model, start=start, cfg=cfg, peaks=peaks,
                 size=CheckpointStore.load_state(result.last_checkpoint).sampler["batch_size"])


def probe_section(args, device, state):
    needs(state, "size")
    if device.type != "cuda":
        print(f"no GPU: nothing to probe (batch {state['size']})", flush=True)
        return
    if not PROBES or PROBES[-1].peak_bytes is None:
        raise NeedsEarlierSection("the batch-size probe did not run in section 2")
    probe, step1 = PROBES[-1], state["peaks"].get(1)
    print(probe.describe(), flush=True)
    print(f"step 1 at batch {state['size']}: real peak {step1 / 2**30:.2f} GiB; probe peak at batch "
          f"{probe.largest_fit}: {probe.peak_bytes / 2**30:.2f} GiB" if step1 else "step 1: no peak recorded", flush=True)
    check("the probe's peak is at least the real peak of step 1", bool(step1) and probe.peak_bytes >= step1,
          f"probe {probe.peak_bytes / 2**30:.2f} GiB, step 1 {(step1 or 0) / 2**30:.2f} GiB")


def resume_section(args, device, state):
    from xtts_ft.train.stability import gpt_state_dict

    needs(state, "size")
    half = max(1, args.steps // 2)
    # A constant LR: the first half is a run with max_steps=half, and a cosine or step schedule is a function of
    # max_steps, so with it the first half would take other LRs than the uninterrupted run's first half.
    sets = {"training.batch_size": str(state["size"]), "training.lr_schedule": "constant"}

    def fresh_run(name: str, **more):
        run_dir = args.out / name
        shutil.rmtree(run_dir, ignore_errors=True)
        seed_codes(args.out / "train", run_dir)
        result, model, start = train_run(args, smoke_config(args, run_dir, **sets, **more), state["prep"])
        weights = {k: v.detach().float().cpu() for k, v in gpt_state_dict(model.gpt).items()}
        return result, weights, start, {r["step"]: r["loss"] for r in step_lines(run_dir)}

    _, ref, start, ref_losses = fresh_run("resume_reference")
    fresh_run("resume", **{"training.max_steps": str(half)})  # the first half, stopped at max_steps ...
    run_dir = args.out / "resume"
    result, model, _ = train_run(args, smoke_config(args, run_dir, **sets), state["prep"])  # ... then resumed
    got = {k: v.detach().float().cpu() for k, v in gpt_state_dict(model.gpt).items()}
    del model
    gap, moved, identical = weight_gap(ref, got, start)
    after = {r["step"]: r["loss"] for r in step_lines(run_dir) if r["step"] > half}
    loss_gap = losses_gap(ref_losses, after)
    print(f"stopped at step {half}, resumed to {result.step}: weight difference {gap:.3g} against {moved:.3g} moved "
          f"by training ({gap / max(moved, 1e-12):.2%}); per-step losses after the resume within {loss_gap:.2%}; "
          f"bit-identical {identical}", flush=True)
    if device.type != "cuda":
        check("resumed run matches the uninterrupted one", result.step == args.steps and identical)
        return
    # On a GPU, kernels with atomics (embedding backward, some reductions) are not bit-reproducible and Adam
    # amplifies that noise over the steps; so the yardstick is how far a second UNINTERRUPTED run drifts from the
    # first, measured here, not a fixed share.
    _, twin, _, twin_losses = fresh_run("resume_twin")
    noise, _, twin_identical = weight_gap(ref, twin, start)
    noise_loss = losses_gap(ref_losses, {s: v for s, v in twin_losses.items() if s > half})
    print(f"noise floor: a second uninterrupted run differs by {noise:.3g} ({noise / max(moved, 1e-12):.2%} of the "
          f"distance moved); its losses after step {half} within {noise_loss:.2%}; bit-identical {twin_identical}", flush=True)
    ok = identical or (gap <= 2 * noise + 1e-3 * moved and loss_gap <= 2 * noise_loss + 1e-3)
    check("resumed run matches the uninterrupted one as closely as a second uninterrupted run does",
          result.step == args.steps and ok,
          f"resume {gap:.3g} / {loss_gap:.2%} against twice the noise floor {2 * noise:.3g} / {2 * noise_loss:.2%}")


def weight_gap(ref: dict, got: dict, start: dict) -> tuple[float, float, bool]:
    """(distance between two GPT weight sets, distance the reference moved from the start, bit-identical)."""
    ref = {k: v.detach().float().cpu() for k, v in ref.items()}
    gap = math.sqrt(sum(float((got[k] - ref[k]).pow(2).sum()) for k in ref))
    moved = math.sqrt(sum(float((ref[k] - start[k].float()).pow(2).sum()) for k in ref))
    return gap, moved, all(torch.equal(ref[k], got[k]) for k in ref)


def losses_gap(before: dict, after: dict) -> float:
    """The largest relative difference between two runs' losses at the same steps."""
    return max((abs(after[s] - before[s]) / max(abs(before[s]), 1e-8) for s in after if s in before), default=1.0)


def eval_inputs_section(args, device, state):
    from xtts_ft.model import model_limits
    from xtts_ft.text_settings import TextSettings
    from xtts_ft.tokenizer.voice_tokenizer import make_tokenizer
    from xtts_ft.train.codes_cache import cache_paths, codes_for_batch, dvae_fingerprint, num_codes
    from xtts_ft.train.data import ClipDataset, Limits, collate, eval_batches, load_clips, read_segment
    from xtts_ft.train.evaluation import eval_losses
    from xtts_ft.train.precision import resolve_precision
    from xtts_ft.train.step import model_inputs as step_inputs

    needs(state, "model", "cfg")
    model, cfg, prep = state["model"].to(device), state["cfg"], state["prep"]
    tok = make_tokenizer(prep.vocab_path, TextSettings.from_config(cfg))
    limits = Limits(**model_limits(model.xtts))
    clips, _ = load_clips(prep.data_dir / EVAL_CSV, tok, "am", limits, progress=False)
    # the eval set as the training loop builds it: codes from the run's cache (written in section 2)
    paths = cache_paths(clips, RunLayout(args.out / "train").codes_cache, dvae_fingerprint(model))
    data = ClipDataset(clips, sample_rate=limits.sample_rate, cond_min_s=cfg.training.min_conditioning_s,
                       cond_max_s=cfg.training.max_conditioning_s, seed=0, train=False, code_paths=paths)
    model_inputs = lambda batch, train: step_inputs(model, device, batch, train=train)  # noqa: E731
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
    stride = int(model.xtts.args.gpt_code_stride_len)
    codes_equal = mels_equal = codes_total = codes_differ = 0
    with torch.no_grad(), torch.amp.autocast(device.type, enabled=False):
        for keys, fed in zip(batches, seen):
            batch = collate([data[key] for key in keys])
            mels = model.conditioning_mels(batch["conditioning"].to(device).float())  # fp32 reference
            mels_equal += int(fed["cond_mels"].dtype == torch.float32 and torch.equal(fed["cond_mels"], mels))
            for row, key in enumerate(keys):  # a fresh DVAE pass over the clip alone
                clip = clips[key.clip]
                wav = torch.from_numpy(read_segment(clip.audio_path, 0, None)).view(1, 1, -1)
                n = num_codes(clip.num_samples, stride)
                alone = codes_for_batch(model, wav.to(device))[0, :n]
                differ = int((fed["audio_codes"][row, :n].to(alone.dtype) != alone).sum())
                codes_equal += int(differ == 0)
                codes_differ, codes_total = codes_differ + differ, codes_total + n
    rows = sum(len(keys) for keys in batches)
    print(f"{len(batches)} eval batches in {policy.name}: eval_loss {losses['eval_loss']:.4f}; codes equal to a fresh "
          f"DVAE pass for {codes_equal} of {rows} clips ({codes_differ} of {codes_total} codes differ); conditioning "
          f"mels equal to fp32 for {mels_equal} of {len(seen)} batches", flush=True)
    # Autocast leaking into the DVAE would change a large share of the codes. On a GPU a batched pass and a
    # one-clip pass pick different convolution kernels (TF32 among them), and a code whose two nearest codebook
    # entries are almost tied can flip; so a GPU may differ in a few codes, never in a share of them.
    tolerated = 0 if device.type != "cuda" else codes_total // 100
    check("eval codes match a fresh fp32 DVAE pass (GPU: at most 1 % of codes) and eval mels equal fp32 ones",
          len(seen) == len(batches) and codes_differ <= tolerated and mels_equal == len(seen),
          f"{codes_differ} of {codes_total} codes differ")


def memory_options_section(args, device, state):
    from xtts_ft.pipeline import make_eval_hook_for
    from xtts_ft.train.precision import PrecisionPolicy, fallback_policy, resolve_precision

    needs(state, "prep", "size")
    run_dir = args.out / "memory_options"
    shutil.rmtree(run_dir, ignore_errors=True)
    seed_codes(args.out / "train", run_dir)
    steps = 1 if args.quick else min(args.steps, 2)  # the split is in step 1, the evaluation after the last
    cfg = smoke_config(args, run_dir, **{"training.batch_size": str(max(2, state["size"])), "training.max_steps":
                                         str(steps), "checkpoint.every_steps": str(steps),
                                         "training.offload_frozen": "true", "training.gradient_checkpointing": "true"})
    if args.quick:  # the paths, not the samples, are under test here: one short sample is enough
        cfg = with_changes(cfg, evaluation={"sentences": cfg.evaluation.sentences[:1], "max_new_tokens": 10})
    prep, at = state["prep"], {"step": None, "injected": 0}
    fp16 = resolve_precision(args.precision, device).name == "fp16"
    if fp16:  # one overflow in step 1 then drops the scale below min_scale: the fp16 fallback fires
        cfg = with_changes(cfg, precision={"min_scale": cfg.precision.init_scale})

    def note_step(step: int):
        at["step"] = step
        return "grad_nan" if fp16 and step == 0 else None  # an overflowing gradient, as fp16 produces them

    def inject_oom(model):
        def before_forward(_module, inputs):  # step 1's first forward of more than one clip runs out of memory
            if at["step"] == 0 and not at["injected"] and inputs[0].shape[0] > 1:
                at["injected"] += 1
                raise torch.OutOfMemoryError("injected by gpu_smoke: CUDA out of memory")

        model.gpt.register_forward_pre_hook(before_forward)

    hook = make_eval_hook_for(cfg, run_dir, prep.vocab_path, prep.data_dir)  # synthesis, speaker sim., recogniser
    result, model, _ = train_run(args, cfg, prep, injector=note_step, eval_hook=hook, edit_model=inject_oom)
    lines = step_lines(run_dir)
    evals = [r for r in read_metrics(run_dir) if r.is_eval]
    failures = [e for e in read_events(run_dir) if e.get("event") == "eval_hook_failed"]
    scored = sorted(k for k in (evals[-1] if evals else {}) if k.startswith("sample_"))  # the hook's metrics
    off_device = [name for name in ("xtts.hifigan_decoder", "dvae")
                  if any(p.device.type != "cpu" for p in model.get_submodule(name).parameters())]
    checkpointing = bool(getattr(model.xtts.gpt.gpt, "gradient_checkpointing", False))
    split = lines[0].get("oom_split", 0) if lines else 0
    print(f"{result.step} steps with offload_frozen and gradient checkpointing ({'on' if checkpointing else 'OFF'}); "
          f"step 1: injected out-of-memory errors {at['injected']}, micro-batches split {split}, loss "
          f"{lines[0]['loss'] if lines else None}; evaluation scored {', '.join(scored) or 'nothing'}"
          + (f"; eval hook failed: {failures[0].get('error')}" if failures else ""), flush=True)
    del model
    check("offload_frozen + gradient checkpointing train and evaluate with sample synthesis",
          result.step == steps and checkpointing and "sample_speaker_similarity" in scored and not failures
          and not off_device, f"modules left on the device: {off_device}" if off_device else "")
    check("an out-of-memory error in step 1 is absorbed by the micro-batch split", at["injected"] == 1 and split >= 1
          and bool(lines) and isinstance(lines[0]["loss"], float) and math.isfinite(lines[0]["loss"]))
    switches = [e for e in read_events(run_dir) if e.get("event") == "precision_switch"]
    if not fp16:
        print(f"precision {args.precision} ({resolve_precision(args.precision, device).name}): no loss scaler, so the "
              f"fp16 fallback is not exercised (run with --precision fp16 for it)", flush=True)
        return
    expected = fallback_policy(PrecisionPolicy("fp16", device.type), device).name
    print(f"fp16 loss scale collapse in step 1: switched to {[e.get('new') for e in switches]} (expected {expected}); "
          f"evaluation ran in {lines[-1]['precision'] if lines else None}", flush=True)
    check(f"a collapsing fp16 loss scale switches the run to {expected}", len(switches) == 1
          and switches[0].get("new") == expected and bool(evals))


def stop_section(args, state):
    from xtts_ft.train.save_time import KILL_AFTER_S, checkpoint_bytes, measure_write_rate

    needs(state, "prep")
    run_dir = args.out / "stop"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    shutil.copytree(state["prep"].data_dir, run_dir / "data")
    seed_codes(args.out / "train", run_dir)
    cmd = [sys.executable, str(REPO / "headless_train.py"), "--config", str(REPO / "configs" / "demo.yaml"),
           *child_sets(args, run_dir), "--set", "training.max_steps=100000", "--set", "checkpoint.every_steps=100000",
           "--set", "training.num_workers=0", "--set", "training.log_every=1"]
    # --quick: the stop lands in step 2 of batch 2 (a stop mid-run is under test, not the steps before it)
    cmd += ["--set", "training.batch_size=2"] if args.quick else []
    steps_before_stop = 1 if args.quick else 2
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if len(step_lines(run_dir)) >= steps_before_stop:
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
    saved = list(CheckpointStore.of_run(run_dir).step_folders().values())
    print(f"SIGTERM -> exit {proc.returncode} in {seconds:.1f} s (torchrun kills after {KILL_AFTER_S:g} s); "
          f"checkpoint {saved[-1].name if saved else 'none'}", flush=True)
    if proc.returncode != 0:
        print(output[-3000:], flush=True)
    check("a stop saves a checkpoint and exits 0 within 30 s", proc.returncode == 0 and bool(saved)
          and seconds < KILL_AFTER_S)
    nbytes = checkpoint_bytes(list(full_size_gpt_params()))
    rate = measure_write_rate(args.out, nbytes=(1024 if not args.quick else 16) * 2**20)
    print(f"full-size XTTS-v2 checkpoint: {nbytes / 1e9:.1f} GB; this disk writes {rate / 1e6:.0f} MB/s fsynced "
          f"-> about {nbytes / rate:.0f} s per save ({'within' if nbytes / rate < KILL_AFTER_S else 'OVER'} "
          f"torchrun's {KILL_AFTER_S:g} s)", flush=True)


def full_size_gpt_params():
    """The full XTTS-v2 GPT's parameters, on the meta device (shapes only, no memory)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from gpu_throughput import FULL, build_gpt

    with torch.device("meta"):
        return list(build_gpt(FULL, torch.device("meta")).parameters())


def two_gpu_section(args):
    if args.cpu or torch.cuda.device_count() < 2:
        print(f"skipped: {0 if args.cpu else torch.cuda.device_count()} GPU(s) visible (needs 2)", flush=True)
        return
    run_dir = args.out / "two_gpus"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(REPO / "headless_train.py"), "--config", str(REPO / "configs" / "demo.yaml"),
           "--max-steps", str(args.steps), *child_sets(args, run_dir)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800)
    print(f"exit {proc.returncode} in {time.perf_counter() - started:.1f} s", flush=True)
    if proc.returncode != 0:
        print((proc.stdout + proc.stderr)[-3000:], flush=True)
    check("2-GPU run from a fresh run dir finishes with a checkpoint", proc.returncode == 0 and bool(
        CheckpointStore.of_run(run_dir).step_folders()))


def throughput_section(args):
    cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_throughput.py")]
    if args.cpu or args.quick:
        cmd += ["--size", "small", "--steps", "1", "--batches", "2", "--precisions", "fp32", "--loader-workers", "0"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, **({"CUDA_VISIBLE_DEVICES": ""} if args.cpu else {})})
    print(proc.stdout.strip(), flush=True)
    check("throughput benchmark ran", proc.returncode == 0, proc.stderr.strip()[-500:] if proc.returncode else "")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Downloads: none by default; --base-model OWNER/NAME downloads that "
                                            "model once (coqui/XTTS-v2: about 2.1 GB) into the Hugging Face cache.")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "gpu_smoke", help="work folder")
    parser.add_argument("--base-model", help=DOWNLOAD_NOTE)
    parser.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp16", "fp32"])
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (default 8, --quick 2)")
    parser.add_argument("--cpu", action="store_true", help="run every section on the CPU (reduced mode)")
    parser.add_argument("--quick", action="store_true", help="fewest steps and the small throughput benchmark")
    parser.add_argument("--sections", default="1-10",
                        help="which sections to run, e.g. 1-6 or 1,2,4 (default all; a section that needs an "
                             "earlier one that did not run reports that)")
    args = parser.parse_args(argv)
    args.steps = args.steps or (2 if args.quick else 8)
    args.out = args.out.resolve()
    args.sections = parse_sections(args.sections, parser)
    return args


def parse_sections(text: str, parser) -> set[int]:
    chosen: set[int] = set()
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if not (low.isdigit() and (not high or high.isdigit())):
            parser.error(f"--sections {text!r}: use numbers and ranges between 1 and 10, e.g. 1-6 or 1,2,4")
        chosen.update(range(int(low), int(high or low) + 1))
    if not chosen <= set(range(1, 11)):
        parser.error(f"--sections {text!r}: the sections are numbered 1 to 10")
    return chosen


def main() -> int:
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    default_allocator_settings()  # as the real entry points do, before CUDA starts
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    record_probes()
    print(f"gpu_smoke: {' '.join(sys.argv[1:]) or '(defaults)'}; git {git_revision()}", flush=True)
    state: dict = {}

    def run_chosen(number, title, fn, *fn_args):  # section 1 always runs: it finds the device
        return run_section(number, title, fn, *fn_args) if number == 1 or number in args.sections else None

    device = run_chosen(1, "device and precision", device_section, args) or torch.device("cpu")

    def train_with_data():
        state["prep"] = prepared(args)
        training_section(args, device, state)

    run_chosen(2, "short training run", train_with_data)
    run_chosen(3, "batch-size probe vs real peak", probe_section, args, device, state)
    run_chosen(4, "resume equality", resume_section, args, device, state)
    run_chosen(5, "evaluation inputs vs training inputs", eval_inputs_section, args, device, state)
    run_chosen(6, "offload_frozen, gradient checkpointing, evaluation, out-of-memory split, fp16 fallback",
                memory_options_section, args, device, state)
    state.pop("model", None)  # the in-process models go before the child processes start
    state.pop("start", None)
    for number, title, fn, fn_args in ((7, "stop (SIGTERM) and checkpoint save time", stop_section, (args, state)),
                                       (8, "two GPUs (torchrun)", two_gpu_section, (args,)),
                                       (9, "throughput", throughput_section, (args,))):
        def child_section(fn=fn, fn_args=fn_args, number=number):
            release_gpu(device, f"section {number}")
            return fn(*fn_args)

        run_chosen(number, title, child_section)
    run_chosen(10, "serving: first audio, streams, half-precision HiFiGAN", serving_section, args, device, state)
    failed = [name for name, ok in RESULTS if not ok]
    print(f"\n## summary: {len(RESULTS) - len(failed)} of {len(RESULTS)} checks passed"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""), flush=True)
    return 1 if failed else 0


def git_revision() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())

"""Rehearse a real run at the real size on a CPU: every stage on a full-size random XTTS-v2.

    nice -n 10 python benchmarks/full_size_rehearsal.py --out /tmp/rehearsal [--steps 2] [--batch 1] [--threads 1]
    python benchmarks/full_size_rehearsal.py --size tiny --steps 1 --eval-sentences 2 --max-new-tokens 10 --out /tmp/r

The last line is the test's form (tests/test_benchmarks.py): the same stages, each as small as it goes.

It writes a random XTTS with the real XTTS-v2 dimensions (``make-random-model --size full``), then
runs the pipeline on the bundled demo clips (short, synthetic) exactly as a user would, each stage
as its own process: prepare + tokenizer + ``--steps`` training steps + the end-of-run evaluation;
a resumed run of two more steps; ``--evaluate`` on a checkpoint; ``export``; ``synthesize``; and
a checkpoint load and save timed on their own. Per stage it records wall time and the peak
resident memory (``ru_maxrss`` of the stage's process, children it waited for included), and
the disk each output takes. The model is random, so its audio is noise and its losses mean
nothing; the sizes, memory and times are those of the real model. Results: ``OUT/rehearsal.json``
and a Markdown table on stdout (``docs/full_size_rehearsal.md`` holds the recorded one).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the repository's xtts_ft, also when it is not pip-installed
MB = 1024 * 1024


def du_mb(path: Path) -> float:
    """Disk actually used under ``path`` (files only), in MiB."""
    if path.is_file():
        return path.stat().st_size / MB
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / MB


def run_stage(name: str, cmd: list[str], log_dir: Path, env: dict) -> dict:
    """Run ``cmd`` as one process; its wall time, peak RSS and exit status."""
    log_path = log_dir / f"{name}.log"
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    result = {"stage": name, "wall_s": round(wall, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024), "exit": code}
    print(f"{name}: {result}", flush=True)
    if code != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise SystemExit(f"stage {name} failed (exit {code}); see {log_path}:\n" + "\n".join(tail))
    return result


def train_cmd(cfg: str, run_dir: Path, model: Path, steps: int, batch: int, threads: int,
              sentences: Optional[list[str]] = None, max_new_tokens: int = 60) -> list[str]:
    """The pipeline's command line; ``sentences``: the evaluations synthesise these (None: the config's), each
    sample at most ``max_new_tokens`` audio codes."""
    sets: dict[str, object] = {
        "run.output_dir": run_dir, "run.device": "cpu", "base_model.source": model, "base_model.create_tiny": "false",
        "training.max_steps": steps, "training.batch_size": batch, "training.grad_accum_steps": 1,
        "training.num_workers": 0, "training.warmup_steps": 0, "training.lr": 5e-6, "training.log_every": 1,
        "training.cpu_threads": threads, "checkpoint.every_steps": 1, "checkpoint.keep_last": 2,
        "evaluation.every_steps": 0, "evaluation.eval_at_start": "false", "evaluation.max_speakers": 1,
        "evaluation.max_new_tokens": max_new_tokens, "evaluation.mcd_clips": 1, "evaluation.max_eval_batches": 4,
        "precision.mode": "fp32",
    }
    if sentences is not None:  # a YAML flow list (JSON is one): --set reads its value as YAML
        sets["evaluation.sentences"] = json.dumps(sentences, ensure_ascii=False)
    cmd = [sys.executable, "headless_train.py", "--config", cfg]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    return cmd


def time_checkpoint_io(ckpt: str, scratch: str) -> None:
    """Helper stage (own process): load a checkpoint, then save it again the way training does."""
    from xtts_ft.checkpoint_store import CheckpointStore
    from xtts_ft.layout import CheckpointLayout

    t0 = time.perf_counter()
    state = CheckpointStore.load_state(Path(ckpt))
    load_s = time.perf_counter() - t0
    record = CheckpointStore.verify(Path(ckpt))
    t0 = time.perf_counter()
    out = CheckpointStore.of_run(Path(scratch)).save(
        state, vocab_path=CheckpointLayout(ckpt).vocab,
        write_config=lambda p: p.write_bytes(CheckpointLayout(ckpt).config.read_bytes()),
        run_id=record.run_id, base_model=record.base_model, eval_loss=record.eval_loss, eval_metrics=record.eval_metrics)
    save_s = time.perf_counter() - t0
    print(json.dumps({"load_s": round(load_s, 1), "save_s": round(save_s, 1), "saved": str(out)}))


def main() -> None:
    from xtts_ft.checkpoint_store import CheckpointStore
    from xtts_ft.config import load_config
    from xtts_ft.layout import RunLayout
    from xtts_ft.run_history import read_evaluations, read_events, read_metrics

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="Scratch folder (needs about 25 GB free at full size).")
    parser.add_argument("--model", type=Path, help="An existing random model of --size (default: write one).")
    parser.add_argument("--size", choices=["full", "tiny"], default="full",
                        help="full: the real XTTS-v2 dimensions; tiny: the same stages in a minute (tests).")
    parser.add_argument("--steps", type=int, default=2, help="Training steps of the first run (resume adds 2).")
    parser.add_argument("--batch", type=int, default=1, help="Clips per step.")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (training.cpu_threads).")
    parser.add_argument("--config", default="configs/demo.yaml", help="Config whose dataset and text settings are used.")
    parser.add_argument("--eval-sentences", type=int, default=None,
                        help="Synthesise only the first N of the config's evaluation sentences (default: all); each "
                             "evaluation's time is mostly its samples, and a random model never stops early.")
    parser.add_argument("--max-new-tokens", type=int, default=60,
                        help="Audio codes per evaluation sample at most (evaluation.max_new_tokens; a random model "
                             "never stops, so each sample costs all of them).")
    parser.add_argument("--time-checkpoint-io", nargs=2, metavar=("CKPT", "SCRATCH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.time_checkpoint_io:
        return time_checkpoint_io(*args.time_checkpoint_io)
    if args.out is None:
        parser.error("--out is required")

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    logs = out / "logs"
    logs.mkdir(exist_ok=True)
    sentences = None
    if args.eval_sentences is not None:
        # only the sentences are read here: the dataset is the pipeline's to check (dataset.path=. passes)
        sentences = load_config(args.config, ["dataset.path=."]).evaluation.sentences[:args.eval_sentences]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    stages, sizes = [], {}
    model = args.model.resolve() if args.model else out / f"base_{args.size}"
    if not args.model:
        stages.append(run_stage(f"write_{args.size}_model", [sys.executable, "-m", "xtts_ft", "make-random-model",
                                                             "--size", args.size, "--out", str(model)], logs, env))
    sizes["base_model_mb"] = round(du_mb(model))
    sizes["base_model_files_mb"] = {p.name: round(du_mb(p), 1) for p in sorted(model.iterdir())}

    run_dir = out / "run"
    stages.append(run_stage("train_first_run", train_cmd(args.config, run_dir, model, args.steps, args.batch,
                                                         args.threads, sentences, args.max_new_tokens), logs, env))
    stages.append(run_stage("train_resumed_run", train_cmd(args.config, run_dir, model, args.steps + 2, args.batch,
                                                           args.threads, sentences, args.max_new_tokens), logs, env))
    resumes = [e for e in read_events(run_dir) if e.get("event") == "resume"]
    store = CheckpointStore.of_run(run_dir)
    ckpts = list(store.step_folders().values())
    latest = ckpts[-1]
    sizes["checkpoint_mb"] = round(du_mb(latest))
    sizes["checkpoints_kept"] = [p.name for p in ckpts]
    sizes["checkpoints_total_mb"] = round(du_mb(store.root))
    sizes["run_dir_mb"] = round(du_mb(run_dir))
    sizes["dvae_code_cache_mb"] = round(du_mb(RunLayout(run_dir).cache), 2) if RunLayout(run_dir).cache.exists() else 0

    io = run_stage("checkpoint_load_and_save", [sys.executable, __file__, "--time-checkpoint-io", str(latest),
                                                 str(out / "io_scratch")], logs, env)
    io.update(json.loads((logs / "checkpoint_load_and_save.log").read_text(encoding="utf-8").splitlines()[-1]))
    stages.append(io)
    cfg_sets = train_cmd(args.config, run_dir, model, args.steps + 2, args.batch, args.threads, sentences,
                         args.max_new_tokens)[4:]
    stages.append(run_stage("evaluate_checkpoint", [sys.executable, "headless_train.py", "--config", args.config,
                                                    *cfg_sets, "--evaluate", "--checkpoint", str(latest)], logs, env))
    export = out / "export"
    stages.append(run_stage("export", [sys.executable, "-m", "xtts_ft", "export", "--checkpoint", str(latest),
                                       "--out", str(export)], logs, env))
    sizes["export_mb"] = round(du_mb(export))
    speaker = sorted((run_dir / "data" / "wavs").rglob("*.wav"))[0]
    stages.append(run_stage("synthesize", [sys.executable, "-m", "xtts_ft", "synthesize", "--model", str(export),
                                           "--text", "ሰላም፣ እንዴት ነህ?", "--speaker-wav", str(speaker),
                                           "--out", str(out / "hello.wav")], logs, env))
    samples = [s for e in read_evaluations(run_dir) for s in e.samples]  # one record per evaluation, its samples inside
    rtfs = [s["rtf"] for s in samples if isinstance(s.get("rtf"), (int, float))]
    train_rows = [m for m in read_metrics(run_dir) if not m.is_eval and m.number("samples_per_s")]
    result = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load avg "
                   f"{os.getloadavg()[0]:.1f} at the end",
        "command": " ".join(sys.argv), "eval_sentences": len(sentences) if sentences is not None else "all",
        "size": args.size, "steps": args.steps, "batch": args.batch, "threads": args.threads,
        "stages": stages, "sizes": sizes,
        "resumed_from": [e.get("checkpoint") for e in resumes],
        "train_samples_per_s": [round(m.number("samples_per_s") or 0.0, 3) for m in train_rows],
        "synthesis_rtf": {"min": round(min(rtfs), 2), "max": round(max(rtfs), 2), "n": len(rtfs)} if rtfs else None,
    }
    (out / "rehearsal.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    print("| stage | wall s | peak RSS MB |\n|---|---|---|")
    for s in stages:
        print(f"| {s['stage']} | {s['wall_s']} | {s['peak_rss_mb']} |")
    print(json.dumps({k: v for k, v in result.items() if k != "stages"}, indent=2))


if __name__ == "__main__":
    main()

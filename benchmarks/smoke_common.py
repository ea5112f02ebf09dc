"""What the GPU smoke test's sections share: the check record, section runner, configs, runs and files.

Imported by ``gpu_smoke.py`` (see its docstring); not a command of its own.
"""

from __future__ import annotations

import gc
import shutil
import sys
import time
import traceback
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from xtts_ft.layout import EVAL_CSV, TRAIN_CSV, RunLayout  # noqa: E402
from xtts_ft.run_history import MetricsRow, read_metrics  # noqa: E402

RESULTS: list[tuple[str, bool]] = []


class NeedsEarlierSection(RuntimeError):
    """A section cannot run because one it builds on failed."""


def section(number: int, title: str) -> None:
    print(f"\n## {number}. {title}", flush=True)


def check(name: str, ok: bool, detail: str = "") -> bool:
    RESULTS.append((name, ok))
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    return ok


def run_section(number: int, title: str, fn, *args):
    """Print the header, run ``fn``; an exception is reported as a failed check and the smoke test goes on."""
    section(number, title)
    started = time.perf_counter()
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - one broken section must not hide the others' results
        if not isinstance(exc, NeedsEarlierSection):
            traceback.print_exc(limit=-4, file=sys.stdout)
        check(f"section {number} ({title}) ran", False, f"{type(exc).__name__}: {exc}".splitlines()[0])
        return None
    finally:
        print(f"(section {number} took {time.perf_counter() - started:.1f} s)", flush=True)


def base_model_sets(args) -> dict[str, str]:
    """The base-model settings every section uses, in-process or in a child process."""
    if args.base_model:  # a folder or a repo id, never replaced by a tiny model
        return {"base_model.source": str(args.base_model), "base_model.create_tiny": "false"}
    return {"base_model.source": str(args.out / "tiny_base"), "base_model.create_tiny": "true"}


def smoke_config(args, run_dir: Path, **sets):
    from xtts_ft.config import load_config

    overrides = {
        "run.output_dir": str(run_dir), "run.device": "cpu" if args.cpu else "auto", **base_model_sets(args),
        "precision.mode": args.precision, "training.max_steps": str(args.steps), "training.warmup_steps": "0",
        "evaluation.every_steps": "0", "evaluation.eval_at_start": "false", "evaluation.mcd_clips": "0",
        "checkpoint.every_steps": str(args.steps), "training.num_workers": "0", "training.log_every": "1", **sets,
    }
    return load_config(REPO / "configs" / "demo.yaml", [f"{k}={v}" for k, v in overrides.items()])


def child_sets(args, run_dir: Path) -> list[str]:
    """``--set`` arguments of a child ``headless_train.py``: the same device, precision and base model."""
    sets = {"run.output_dir": run_dir, "run.device": "cpu" if args.cpu else "auto", **base_model_sets(args),
            "precision.mode": args.precision, "evaluation.every_steps": 0, "evaluation.eval_at_start": "false",
            "training.warmup_steps": 0}
    return [arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")]


def release_gpu(device: torch.device, before: str) -> None:
    """Free what the in-process sections left (reference cycles, the allocator's cache) before a child starts."""
    gc.collect()
    if device.type != "cuda":
        return
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    held, reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
    print(f"before {before}: this process holds {held / 2**20:.0f} MiB allocated, {reserved / 2**20:.0f} MiB "
          f"reserved on {device} (plus its CUDA context)", flush=True)
    check(f"GPU memory released before {before}", held < 256 * 2**20, f"{held / 2**20:.0f} MiB still allocated")


def prepared(args):
    """The demo dataset prepared and its vocabulary built once, in OUT/data_run (the base model resolved there)."""
    from xtts_ft.pipeline import run_pipeline

    return run_pipeline(smoke_config(args, args.out / "data_run"), train_model=False)


def train_run(args, cfg, prep, *, injector=None, eval_hook=None, edit_model=None):
    """run_training on the prepared data; returns (result, the trained model, its GPT weights before training)."""
    from tests.fixtures.faults import patched_recipe
    from xtts_ft.base_model import resolve_base_model
    from xtts_ft.model import build_training_model
    from xtts_ft.pipeline import base_vocab_size, run_training
    from xtts_ft.train import TrainInputs
    from xtts_ft.train.stability import gpt_state_dict, to_cpu

    base = resolve_base_model(cfg.base_model)
    built, start = [], {}

    def factory(*a):
        built.append(build_training_model(*a))
        start.update(to_cpu(gpt_state_dict(built[-1].gpt)))
        if edit_model is not None:
            edit_model(built[-1])
        return built[-1]

    inputs = TrainInputs(base=base, vocab_path=prep.vocab_path, base_vocab_size=base_vocab_size(base),
                         train_csv=prep.data_dir / TRAIN_CSV, eval_csv=prep.data_dir / EVAL_CSV,
                         run_dir=cfg.run_dir, eval_hook=eval_hook)
    with patched_recipe(factory, injector):  # the model builder and the step's seams, patched for this run
        result = run_training(cfg, inputs)
    return result, built[-1], start


def seed_codes(src_run: Path, dst_run: Path) -> None:
    """Start a run dir with the DVAE codes an earlier run computed (the same clips and DVAE)."""
    src = RunLayout(src_run).codes_cache
    if src.is_dir():
        shutil.copytree(src, RunLayout(dst_run).codes_cache, dirs_exist_ok=True)


def step_lines(run_dir: Path) -> list[MetricsRow]:
    """The run's training rows of metrics.jsonl (read by the run-history module, like every reader)."""
    return [r for r in read_metrics(run_dir) if not r.is_eval]


def needs(state: dict, *keys: str) -> None:
    missing = [k for k in keys if state.get(k) is None]
    if missing:
        raise NeedsEarlierSection(f"not run: it needs {', '.join(missing)} from an earlier section, which failed")

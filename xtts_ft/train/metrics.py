"""What the run reports: a tqdm bar, a console line, metrics.jsonl and TensorBoard, all from rank 0.

Every optimizer step: the bar advances (loss, LR, grad norm in its postfix) and TensorBoard gets
loss, LR, grad norm and loss scale. Every ``training.log_every`` steps: one console line and one
JSON object in ``<run_dir>/metrics.jsonl`` with the interval's mean losses and the current LR,
grad norm, loss scale, skip counters (non-finite steps; ``oom_split``/``oom_skipped``), samples/s and
ETA. Evaluations add a line with ``"split": "eval"``. Events (checkpoint, resume, rollback,
precision switch, out-of-memory split/skip, stop) go to
``<run_dir>/events.jsonl``, one object with ``"event"`` and ``"step"`` per line, so metrics.jsonl
holds only step and eval lines. Non-finite numbers are written as ``null`` (JSON has no NaN).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from xtts_ft.json_types import JsonValue
from xtts_ft.layout import RunLayout
from xtts_ft.run_history import Appender, Event, MetricsRow, open_events, open_metrics, truncate_metrics
from xtts_ft.train.stability import StabilityGuard, StepStats
from xtts_ft.training_state import IntervalState

log = logging.getLogger(__name__)


def _fmt_duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


@dataclass(frozen=True)
class _Outputs:
    """Where rank 0 reports: the history files, TensorBoard and the bar (other ranks have none)."""

    metrics: Appender[MetricsRow]
    events: Appender[Event]
    tb: SummaryWriter
    bar: tqdm


class MetricsLogger:
    def __init__(self, run_dir: Path, *, enabled: bool, max_steps: int, start_step: int, log_every: int):
        self.max_steps = max_steps
        self.log_every = log_every
        self._reset_interval()
        self._out: Optional[_Outputs] = None
        if not enabled:
            return

        run_dir.mkdir(parents=True, exist_ok=True)
        # A resumed run trains again the steps after its checkpoint: their old lines and curves go, so
        # metrics.jsonl and TensorBoard show each step once. events.jsonl keeps the history (it has the resume).
        files = RunLayout(run_dir)
        dropped = truncate_metrics(run_dir, start_step)
        if dropped:
            log.info("metrics.jsonl: %d line(s) after step %d removed (those steps are trained again)", dropped, start_step)
        self._out = _Outputs(
            metrics=open_metrics(run_dir), events=open_events(run_dir),
            tb=SummaryWriter(str(files.tensorboard), purge_step=start_step + 1 if start_step else None),
            bar=tqdm(  # disable=None: a live bar on a terminal, none in redirected logs (the lines suffice)
                total=max_steps, initial=start_step, desc="train", unit="step", dynamic_ncols=True, disable=None,
                mininterval=1.0,
            ),
        )

    @property
    def enabled(self) -> bool:
        """Whether this process reports (rank 0, until :meth:`close`)."""
        return self._out is not None

    def interval_state(self) -> IntervalState:
        """The running average of the steps since the last logged row, for the checkpoint: a resumed run's first
        row then averages the same steps as an uninterrupted run's."""
        return {"n": self._n, "finite": self._finite, "sums": list(self._sums), "samples": self._samples,
                "seconds": self._seconds, "compile": self._compile}

    def load_interval_state(self, state: Optional[IntervalState]) -> None:
        """Continue the running average saved by :meth:`interval_state` (None: an older checkpoint, start afresh)."""
        if not state:
            return
        self._n, self._finite = int(state["n"]), int(state["finite"])
        self._sums = [float(v) for v in state["sums"]]
        self._samples, self._seconds = int(state["samples"]), float(state["seconds"])
        self._compile = float(state.get("compile", 0.0))

    def _reset_interval(self) -> None:
        self._n = 0
        self._finite = 0
        self._sums = [0.0, 0.0, 0.0]
        self._samples = 0
        self._seconds = 0.0
        self._compile = 0.0

    def train_step(
        self, step: int, stats: StepStats, *, lr: float, guard: StabilityGuard, precision: str, epoch: int,
        samples: int, seconds: float, epochs: Optional[float] = None, audio_hours: Optional[float] = None,
        compile_s: float = 0.0, compile_pending_s: float = 0.0,
    ) -> None:
        """Record optimizer step ``step`` (1-based count of steps done); ``epochs``: passes over the training clips
        so far (fractional), ``audio_hours``: hours of training audio seen so far; ``compile_s``: of the step's
        ``seconds``, those spent compiling (training.compile), ``compile_pending_s``: compile time still expected.
        The ETA is the interval's steps less their compile time, times the steps left, plus the pending compiles."""
        out = self._out
        if out is None:
            return
        self._n += 1
        self._samples += samples
        self._seconds += seconds
        self._compile += compile_s
        if math.isfinite(stats.loss):
            self._finite += 1
            for i, v in enumerate((stats.loss, stats.loss_text_ce, stats.loss_mel_ce)):
                self._sums[i] += v
        scalars = (("loss", stats.loss), ("lr", lr), ("grad_norm", stats.grad_norm), ("loss_scale", stats.loss_scale),
                   ("epochs", epochs), ("audio_hours", audio_hours))
        for key, value in scalars:
            if value is not None and math.isfinite(value):
                out.tb.add_scalar(f"train/{key}", value, step)
        out.bar.update(1)
        out.bar.set_postfix(loss=f"{stats.loss:.4f}", lr=f"{lr:.2e}", grad=f"{stats.grad_norm:.3f}", refresh=False)
        if step % self.log_every and step != self.max_steps:
            return
        per_step = max(0.0, self._seconds - self._compile) / max(1, self._n)
        mean = [s / self._finite if self._finite else float("nan") for s in self._sums]
        samples_per_s = self._samples / self._seconds if self._seconds else None
        eta_s = per_step * (self.max_steps - step) + compile_pending_s
        record: dict[str, JsonValue] = {
            "epoch": epoch, "epochs": epochs, "audio_hours": audio_hours,
            "loss": mean[0], "loss_text_ce": mean[1], "loss_mel_ce": mean[2],
            "lr": lr, "grad_norm": stats.grad_norm, "loss_scale": stats.loss_scale,
            "skipped_steps": guard.skipped_steps, "skipped_nonfinite_loss": guard.skipped_nonfinite_loss,
            "skipped_nonfinite_grad": guard.skipped_nonfinite_grad, "rollbacks": guard.rollbacks,
            "oom_split": guard.oom_split, "oom_skipped": guard.oom_skipped,
            "precision": precision, "samples_per_s": samples_per_s, "eta_s": eta_s, "time": time.time(),
        }
        if self._compile:
            record["compile_s"] = self._compile
        out.metrics.append(MetricsRow(step=step, fields=record))
        if samples_per_s is not None:
            out.tb.add_scalar("train/samples_per_s", samples_per_s, step)
        out.tb.add_scalar("train/skipped_steps", guard.skipped_steps, step)
        compiled = f" | compiling {self._compile:.1f} s" if self._compile else ""
        seen = f" | epoch {epochs:.2f}, {audio_hours:.2f} h of audio" if epochs is not None and audio_hours is not None else ""
        log.info(
            "step %d/%d%s | loss %.4f (text %.4f, mel %.4f) | lr %.3g | grad %.3f | scale %g | skipped %d | "
            "%.1f samples/s | eta %s%s",
            step, self.max_steps, seen, mean[0], mean[1], mean[2], lr, stats.grad_norm, stats.loss_scale,
            guard.skipped_steps, samples_per_s or 0.0, _fmt_duration(eta_s), compiled,
        )
        self._reset_interval()

    def evaluation(self, step: int, losses: dict[str, float], extra: Optional[dict[str, float]] = None) -> None:
        out = self._out
        if out is None:
            return
        out.metrics.append(MetricsRow(step=step, split="eval", fields={**losses, **(extra or {}), "time": time.time()}))
        for key, value in {**losses, **(extra or {})}.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                out.tb.add_scalar(f"eval/{key.removeprefix('eval_')}", value, step)
        out.tb.flush()
        log.info("eval @ step %d | " + " | ".join(f"{k} {v:.4f}" for k, v in losses.items()), step)

    def event(self, step: int, event: str, **fields: JsonValue) -> None:
        out = self._out
        if out is None:
            return
        if event == "rollback":  # the step counter went back
            out.bar.n = step
            out.bar.refresh()
        out.events.append(Event.now(event, step, fields))

    def close(self) -> None:
        out, self._out = self._out, None
        if out is None:
            return
        out.bar.close()
        out.tb.close()
        out.metrics.close()
        out.events.close()


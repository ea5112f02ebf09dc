"""The DVAE stage (``dvae.finetune``): fine-tune the DVAE on the run's training audio before the GPT stage.

XTTS's GPT predicts the codes the DVAE (coqui's ``DiscreteVAE``) gives the target audio, and HiFiGAN
never sees those codes, so the DVAE only decides what the GPT has to learn. Every public recipe keeps it
frozen; anhnh2002's author reports that fine-tuning it on the new language's audio helps short texts and
sound systems far from XTTS's. This stage trains it on random crops of the run's training clips with the
loss coqui's ``DiscreteVAE.forward`` computes (the MSE of the normalised mel it reconstructs, plus the
codebook commitment loss, weighted by ``dvae.commitment_weight``; the codebook itself follows its EMA).

It is a stage of its own (``<run>/dvae/``):

- ``dvae.pth``: the fine-tuned weights, with the keys of coqui/XTTS-v2's ``dvae.pth``. The pipeline hands
  the GPT stage a base model whose ``dvae_pth`` is this file, so training, evaluation, every checkpoint
  folder and the export use it; the DVAE code cache is keyed on the DVAE weights' hash
  (``codes_cache.dvae_fingerprint``), so codes of the base DVAE are never reused.
- ``dvae_state.pt``: weights, optimizer, scaler and step, saved every ``dvae.every_steps`` steps and when a
  stop is requested, removed when the stage is done (it is 3x the size of dvae.pth); a stopped stage
  continues from it (the crops of a step depend on the seed and the step only, so a resumed stage sees the
  same data as an uninterrupted one).
- ``report.json``: the held-out reconstruction loss (the DVAE in eval mode: decoded from its codes, the way
  the codes the GPT learns are made) on the first ``dvae.eval_clips`` eval clips, before and after.

The same stability pieces as the GPT loop: the run's precision policy (autocast, GradScaler under fp16, the
mel front end always in fp32), gradient clipping on unscaled gradients, and a non-finite loss or gradient
skips the step (the codebook's EMA buffers are put back) and is counted; ``dvae.max_bad_steps`` in a row stop
the stage with a diagnosis.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import soundfile as sf
import torch
import torch.nn as nn

from xtts_ft import stages
from xtts_ft.base_model import BaseModelFiles
from xtts_ft.config import Config
from xtts_ft.errors import CheckpointError, ConfigError, DataError, TrainingStopped
from xtts_ft.json_types import JsonObject
from xtts_ft.layout import DVAE_FILE, DVAE_STATE_FILE, EVAL_CSV, STAGE_REPORT, TRAIN_CSV, RunLayout
from xtts_ft.model import _build_dvae, load_xtts_config, new_dvae_mel
from xtts_ft.safe_load import load_weights
from xtts_ft.stop_signals import StopRequested, stop_requested
from xtts_ft.tempfiles import atomic_write
from xtts_ft.train.data import read_manifest, read_segment
from xtts_ft.train.precision import make_scaler, resolve_precision

log = logging.getLogger(__name__)

STAGE_VERSION = "dvae-v1"
FRAMES_PER_CODE = 4  # the DVAE's two stride-2 convolutions: its mel input must be a multiple of 4 frames


@dataclass
class DvaeStageResult:
    dvae_pth: Path
    eval_loss_before: Optional[float]
    eval_loss_after: Optional[float]
    steps: int
    skipped_steps: int

    def to_dict(self) -> JsonObject:
        return {**dataclasses.asdict(self), "dvae_pth": str(self.dvae_pth)}


def read_dvae_report(run_dir: Path) -> Optional[JsonObject]:
    """The DVAE stage's report.json of a run, or None (no DVAE stage, or not finished)."""
    path = RunLayout(run_dir).dvae_report
    if not path.is_file():
        return None
    try:
        report: JsonObject = json.loads(path.read_text(encoding="utf-8"))
        return report
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def dvae_summary(run_dir: Path) -> Optional[str]:
    """One line for the run's report: the DVAE stage's held-out reconstruction loss before and after."""
    report = read_dvae_report(run_dir)
    if report is None:
        return None
    return (f"DVAE stage (dvae.finetune): held-out reconstruction loss {_fmt(report.get('eval_loss_before'))} -> "
            f"{_fmt(report.get('eval_loss_after'))} after {report.get('steps')} steps "
            f"({report.get('skipped_steps')} skipped) on {report.get('eval_clips')} eval clips; lower is better. "
            f"The GPT was trained on this DVAE's codes.")


def fine_tuned_dvae(run_dir: Path, base: BaseModelFiles) -> Optional[Path]:
    """``base.dvae_pth`` when it is this run's fine-tuned DVAE (the pipeline put it there), else None."""
    own = (RunLayout(run_dir).dvae / DVAE_FILE).resolve()
    return base.dvae_pth if Path(base.dvae_pth).resolve() == own else None


def _audio_paths(csv_path: Path) -> list[tuple[Path, int]]:
    """(audio file, samples) of every row of a prepared CSV."""
    return [(csv_path.parent / row["audio_file"], sf.info(str(csv_path.parent / row["audio_file"])).frames)
            for row in read_manifest(csv_path)]


class _DvaeData:
    """Random fixed-length crops of the training clips, a pure function of (seed, step)."""

    def __init__(self, clips: list[tuple[Path, int]], crop: int, batch_size: int, seed: int):
        self.clips, self.crop, self.batch_size, self.seed = clips, crop, batch_size, seed

    def batch(self, step: int) -> torch.Tensor:
        rng = np.random.default_rng([self.seed, 7877, step])
        wav = torch.zeros(self.batch_size, 1, self.crop)
        for row, i in enumerate(rng.integers(0, len(self.clips), size=self.batch_size)):
            path, n = self.clips[int(i)]
            start = int(rng.integers(0, n - self.crop, endpoint=True)) if n > self.crop else 0
            seg = read_segment(path, start, min(start + self.crop, n))
            wav[row, 0, : seg.shape[0]] = torch.from_numpy(seg)
        return wav


def _mel_to_codes_length(mel: torch.Tensor) -> torch.Tensor:
    frames = mel.shape[-1] - mel.shape[-1] % FRAMES_PER_CODE
    return mel[..., :frames]


@torch.no_grad()
def held_out_loss(dvae: nn.Module, mel_fn: nn.Module, clips: list[tuple[Path, int]], crop: int,
                  device: torch.device) -> Optional[float]:
    """Mean reconstruction loss (eval mode: decoded from the codes) over the first ``crop`` samples of each clip."""
    if not clips:
        return None
    was_training = dvae.training
    dvae.eval()
    total = 0.0
    for path, n in clips:
        wav = torch.from_numpy(read_segment(path, 0, min(n, crop)))[None, None].to(device)
        mel = _mel_to_codes_length(mel_fn(wav))
        recon, _, _ = dvae(mel)
        total += float(recon.float().mean())
    dvae.train(was_training)
    return total / len(clips)


def stage_key(cfg: Config, base: BaseModelFiles, data_dir: Path) -> str:
    """What the stage's result depends on: its settings, the base DVAE and mel stats, the prepared data."""
    return stages.hash_inputs(
        STAGE_VERSION, dataclasses.asdict(cfg.dvae), cfg.run.seed, cfg.precision.mode,
        stages.file_stats([base.dvae_pth, base.mel_stats_pth, data_dir / TRAIN_CSV, data_dir / EVAL_CSV]),
    )


def dvae_stage(cfg: Config, base: BaseModelFiles, data_dir: Path) -> Optional[DvaeStageResult]:
    """Run (or reuse, or continue) the DVAE stage; None when ``dvae.finetune`` is off."""
    if not cfg.dvae.finetune:
        return None
    out = RunLayout(cfg.run_dir).dvae
    key = stage_key(cfg, base, data_dir)
    if stages.is_current(out, key, [DVAE_FILE, STAGE_REPORT]):
        report = read_dvae_report(cfg.run_dir) or {}
        log.info("dvae: inputs unchanged, reusing %s", out / DVAE_FILE)
        return DvaeStageResult(out / DVAE_FILE, report.get("eval_loss_before"), report.get("eval_loss_after"),
                               int(report.get("steps", 0)), int(report.get("skipped_steps", 0)))
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        # coqui's codebook all-reduces its EMA whenever a process group exists: rank 0 alone would wait forever
        raise ConfigError("dvae.finetune: the DVAE stage runs in one process; run the same command once without "
                          "torchrun (it stops after the DVAE stage is done with --set training.max_steps=... or "
                          "Ctrl+C once training starts), then torchrun reuses the stage's dvae.pth")
    return DvaeTrainer(cfg, base, data_dir, key).run()


class DvaeTrainer:
    """One DVAE stage: setup (model, data, optimizer, saved state), steps, then dvae.pth and report.json."""

    def __init__(self, cfg: Config, base: BaseModelFiles, data_dir: Path, key: str):

        self.cfg, self.dcfg, self.key = cfg, cfg.dvae, key
        self.out = RunLayout(cfg.run_dir).dvae
        device = cfg.run.device
        self.device = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else
                                   ("cpu" if device == "auto" else device))
        xcfg = load_xtts_config(base.config_json)
        sr = self.sample_rate = int(xcfg.audio.dvae_sample_rate)
        stride = int(xcfg.model_args.gpt_code_stride_len)
        self.crop = max(1, round(self.dcfg.crop_s * sr / stride)) * stride
        self.dvae = _build_dvae(base.dvae_pth, xcfg.model_args.gpt_num_audio_tokens).to(self.device)
        self.dvae.requires_grad_(True).train()
        self.mel = new_dvae_mel(base.mel_stats_pth, sr).to(self.device)
        train_clips = _audio_paths(data_dir / TRAIN_CSV)
        if not train_clips:
            raise DataError(f"{data_dir / TRAIN_CSV}: no training clip for the DVAE stage")
        self.eval_clips = _audio_paths(data_dir / EVAL_CSV)[: self.dcfg.eval_clips]
        self.data = _DvaeData(train_clips, self.crop, self.dcfg.batch_size, cfg.run.seed)
        self.policy = resolve_precision(cfg.precision.mode, self.device)
        self.scaler = make_scaler(self.policy, cfg.precision)
        self.optimizer = torch.optim.AdamW(self.dvae.parameters(), lr=self.dcfg.lr, betas=(0.9, 0.999),
                                           weight_decay=0.0)
        self.step = self.skipped = self.bad_in_row = 0
        self.loss_before: Optional[float] = None
        self.seconds = 0.0

    # ------------------------------------------------------------------ state
    def _state(self) -> dict[str, object]:  # dvae_state.pt: torch state dicts and the stage's counters
        return {"inputs": self.key, "step": self.step, "skipped_steps": self.skipped, "loss_before": self.loss_before,
                "seconds": self.seconds, "dvae": self.dvae.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict()}

    def save_state(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        state = self._state()
        atomic_write(self.out / DVAE_STATE_FILE, lambda f: torch.save(state, f), durable=True)

    def restore(self) -> bool:
        """Continue from ``dvae_state.pt`` when it was written for the same inputs; True if it was."""

        path = self.out / DVAE_STATE_FILE
        if not path.is_file():
            return False
        state = load_weights(path, CheckpointError)
        if not isinstance(state, dict) or state.get("inputs") != self.key:
            log.warning("dvae: %s was saved for other settings or data; the DVAE stage starts again", path)
            return False
        self.dvae.load_state_dict(state["dvae"])
        self.optimizer.load_state_dict(state["optimizer"])
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.step, self.skipped = int(state["step"]), int(state["skipped_steps"])
        self.loss_before, self.seconds = state["loss_before"], float(state["seconds"])
        log.info("dvae: resuming the DVAE stage from %s at step %d of %d", path, self.step, self.dcfg.steps)
        return True

    # ------------------------------------------------------------------ steps
    def lr_at(self, step: int) -> float:
        warm = self.dcfg.warmup_steps
        return self.dcfg.lr * min(1.0, (step + 1) / warm) if warm else self.dcfg.lr

    def train_step(self) -> float:
        """One step; returns its loss (non-finite: the step was skipped and the codebook put back)."""
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr_at(self.step)
        wav = self.data.batch(self.step).to(self.device)
        with torch.no_grad():
            mel = _mel_to_codes_length(self.mel(wav))  # fp32 outside autocast (see train/evaluation.py)
        codebook = {k: v.clone() for k, v in self.dvae.codebook.state_dict().items()}  # EMA moves in forward
        with self.policy.autocast():
            recon, commitment, _ = self.dvae(mel)
            loss = recon.float().mean() + self.dcfg.commitment_weight * commitment.float().mean()
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        clip = self.dcfg.grad_clip if self.dcfg.grad_clip > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(self.dvae.parameters(), clip)
        value, norm_value = float(loss.detach()), float(norm)
        if math.isfinite(value) and math.isfinite(norm_value):
            self.scaler.step(self.optimizer)
            self.bad_in_row = 0
        else:
            self.dvae.codebook.load_state_dict(codebook)
            self.skipped += 1
            self.bad_in_row += 1
            log.warning("dvae: step %d skipped: loss %s, gradient norm %s", self.step + 1, value, norm_value)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return value

    def run(self) -> DvaeStageResult:
        if not self.restore():
            self.loss_before = held_out_loss(self.dvae, self.mel, self.eval_clips, self.crop, self.device)
            log.info("dvae: held-out reconstruction loss before fine-tuning %s", _fmt(self.loss_before))
        every, last = self.dcfg.every_steps, None
        while self.step < self.dcfg.steps:
            if stop_requested():
                self.save_state()
                raise StopRequested(f"the DVAE stage at step {self.step} (saved; it continues from there)")
            t0 = time.perf_counter()
            last = self.train_step()
            self.step += 1
            self.seconds += time.perf_counter() - t0
            if self.bad_in_row >= self.dcfg.max_bad_steps:
                self.save_state()
                raise TrainingStopped(
                    f"dvae: {self.bad_in_row} non-finite steps in a row at step {self.step} (precision "
                    f"{self.policy.name}); lower dvae.lr (now {self.dcfg.lr:g}) or set precision.mode: fp32")
            if self.step % every == 0 or self.step == self.dcfg.steps:
                self.save_state()
            if self.step % max(1, self.dcfg.steps // 10) == 0:
                log.info("dvae: step %d/%d loss %.4f", self.step, self.dcfg.steps, last)
        return self.finish()

    def finish(self) -> DvaeStageResult:
        after = held_out_loss(self.dvae, self.mel, self.eval_clips, self.crop, self.device)
        weights = {k: v.detach().to("cpu") for k, v in self.dvae.state_dict().items()}
        atomic_write(self.out / DVAE_FILE, lambda f: torch.save(weights, f), durable=True)
        result = DvaeStageResult(self.out / DVAE_FILE, self.loss_before, after, self.step, self.skipped)
        report = {**result.to_dict(), "eval_clips": len(self.eval_clips), "crop_s": round(self.crop / self.sample_rate, 3),
                  "seconds": round(self.seconds, 1), "precision": self.policy.name}
        atomic_write(self.out / STAGE_REPORT, json.dumps(report, indent=2))
        stages.mark_done(self.out, self.key, steps=self.step)
        (self.out / DVAE_STATE_FILE).unlink(missing_ok=True)  # 3x dvae.pth; only a stage cut short needs it
        log.info("dvae: held-out reconstruction loss %s -> %s after %d steps (%d skipped); %s",
                 _fmt(self.loss_before), _fmt(after), self.step, self.skipped, self.out / DVAE_FILE)
        return result


def _fmt(value: Optional[float]) -> str:
    return "n/a (no eval clip)" if value is None else f"{value:.4f}"

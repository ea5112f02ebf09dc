"""The model being fine-tuned: XTTS-v2 with a grown text vocabulary, and what training needs beside it.

``XttsTrainingModel`` holds the coqui ``Xtts`` (GPT + HiFiGAN decoder), the DVAE that turns
target audio into codes, and the two mel extractors. It does what coqui's ``GPTTrainer`` does
for one step, without importing it (its module imports coqui's XTTS dataset, which calls
``torch.set_num_threads(1)`` at import time) and without its resize path (unit-variance new rows,
and the assumption that [START] is the last id).

Only ``xtts.gpt`` is trained; everything else is frozen and kept in eval mode.

The mel loss is computed here, not taken from coqui's GPT (``TTS/tts/layers/xtts/gpt.py``, coqui-tts
0.28.0, lines 463-466): its "ignore the prompt segment" step runs after the padding loop and uses
that loop's leftover ``idx``, so only the *last* row of a batch has its prompt excluded, and its
``cond_idxs`` were divided by 256 (the conditioning-mel hop) rather than the 1024-sample code stride,
so the excluded span sits at 4x the prompt's code positions. Every other row learns to copy the
prompt it was conditioned on. :func:`prompt_masked_mel_loss` recomputes the cross-entropy from the
GPT's own mel logits with each row's prompt codes ignored; coqui is called without ``cond_idxs``
(they only feed that mask and an attention mask its ``get_logits`` replaces), so nothing of coqui
is patched.

Which forward a training step runs (``use_forward``): ``fast`` (``gpt_forward.fast_gpt_losses``, the
same function laid out for speed, its blocks optionally compiled: ``gpt_compile.CompiledBlocks``) or
``coqui`` (:func:`coqui_gpt_losses`, the reference). A built model starts on ``coqui``; the trainer
sets ``training.gpt_forward``. Synthesis and export call coqui's GPT directly and never see either.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import ContextManager, Optional, Sequence

import torch
import torch.nn as nn
from TTS.tts.configs.xtts_config import XttsConfig
from TTS.tts.layers.tortoise.arch_utils import TorchMelSpectrogram
from TTS.tts.layers.xtts.dvae import DiscreteVAE
from TTS.tts.models.xtts import Xtts

from xtts_ft.base_model import BaseModelFiles
from xtts_ft.errors import ModelError
from xtts_ft.gpt_forward import BlockRunner, check_supported, fast_gpt_losses, row_length
from xtts_ft.gpt_targets import (  # noqa: F401 - the loss weights: re-exported
    LOSS_MEL_CE_WEIGHT,
    LOSS_TEXT_CE_WEIGHT,
    prompt_masked_mel_loss,
    weighted_losses,
)
from xtts_ft.languages import AMHARIC
from xtts_ft.safe_load import load_weights
from xtts_ft.tokenizer.resize import resize_text_rows
from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer

log = logging.getLogger(__name__)

_DROPPED_KEYS = ("torch_mel_spectrogram_style_encoder", "torch_mel_spectrogram_dvae", "dvae")


def load_xtts_config(config_json: Path) -> XttsConfig:
    cfg = XttsConfig()
    try:
        cfg.load_json(str(config_json))
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"{config_json}: not a valid XTTS config.json ({exc})") from None
    return cfg


def load_state_dict_file(path: Path) -> object:
    """torch.load with weights_only=True; a pickle that would run code is refused by name (one line). What the file
    holds: a state dict by name (model.pth, dvae.pth) or one tensor (mel_stats.pth); the caller checks which."""
    return load_weights(path, ModelError)


def base_state_dict(model_pth: Path) -> dict[str, torch.Tensor]:
    """The base model's Xtts weights with coqui-trainer prefixes removed and DVAE/mel keys dropped."""
    ckpt = load_state_dict_file(model_pth)
    state = ckpt.get("model", ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(state, dict):
        raise ModelError(f"{model_pth}: expected a dict with a 'model' state dict")
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        key = key[len("xtts.") :] if key.startswith("xtts.") else key
        if key.split(".")[0] not in _DROPPED_KEYS:
            out[key] = value
    return out


def new_dvae(num_audio_tokens: int) -> nn.Module:
    """The XTTS-v2 DVAE (as coqui's GPTTrainer builds it), randomly initialised from a fixed seed."""
    with torch.random.fork_rng(devices=[]):
        # An empty dvae.pth (the tiny demo model) keeps these weights: deterministic codes.
        torch.manual_seed(0)
        return DiscreteVAE(
            channels=80,
            normalization=None,
            positional_dims=1,
            num_tokens=num_audio_tokens - 2,
            codebook_dim=512,
            hidden_dim=512,
            num_resnet_blocks=3,
            kernel_size=3,
            num_layers=2,
            use_transposed_convs=False,
        )


def new_dvae_mel(mel_stats_pth: Path, sample_rate: int) -> nn.Module:
    """The DVAE's mel front end (normalised by mel_stats), as coqui's GPTTrainer builds it."""

    return TorchMelSpectrogram(mel_norm_file=str(mel_stats_pth), sampling_rate=sample_rate)


def dvae_state_problem(dvae: nn.Module, state: object, dvae_pth: Path) -> Optional[str]:
    """One line saying why ``state`` does not fit ``dvae`` (missing tensors or other shapes), else None."""
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        return f"{dvae_pth}: not a DVAE state dict (expected tensors by name, as coqui/XTTS-v2's dvae.pth)"
    expected = dvae.state_dict()
    missing = [k for k in expected if k not in state]
    if missing:
        return f"{dvae_pth}: DVAE weights lack {len(missing)} tensors (e.g. {missing[0]}); use the base model's own dvae.pth"
    wrong = [k for k in expected if tuple(state[k].shape) != tuple(expected[k].shape)]
    if wrong:
        k = wrong[0]
        return (f"{dvae_pth}: {len(wrong)} DVAE tensors have other shapes than this model's DVAE (e.g. {k}: "
                f"{tuple(state[k].shape)}, expected {tuple(expected[k].shape)}); dvae.pth belongs to another model: "
                f"use the dvae.pth of the same base model as config.json")
    return None


def _build_dvae(dvae_pth: Path, num_audio_tokens: int) -> nn.Module:
    state = load_state_dict_file(dvae_pth)
    dvae = new_dvae(num_audio_tokens)
    if state:
        problem = dvae_state_problem(dvae, state, dvae_pth)
        if problem:
            raise ModelError(problem)
        dvae.load_state_dict(state, strict=False)
    else:
        log.warning("%s is empty: using a seeded random DVAE (tiny demo model only)", dvae_pth)
    dvae.eval().requires_grad_(False)
    return dvae


class XttsTrainingModel(nn.Module):
    """Xtts + DVAE + mel extractors; ``forward(batch)`` returns the GPT losses."""

    def __init__(self, xtts: nn.Module, dvae: nn.Module, mel_stats_pth: Path):
        super().__init__()
        self.xtts = xtts
        self.dvae = dvae
        args = xtts.args
        sr = xtts.config.audio.sample_rate
        if args.gpt_use_perceiver_resampler:
            style = dict(filter_length=2048, hop_length=256, win_length=1024)
        else:
            style = dict(filter_length=4096, hop_length=1024, win_length=4096)
        self.mel_style = TorchMelSpectrogram(
            **style, normalize=False, sampling_rate=sr, mel_fmin=0, mel_fmax=8000, n_mel_channels=80,
            mel_norm_file=str(mel_stats_pth),
        )
        self.mel_dvae = new_dvae_mel(mel_stats_pth, xtts.config.audio.dvae_sample_rate)
        self.requires_grad_(False)
        self.xtts.gpt.requires_grad_(True)
        self.forward_path = "coqui"  # training.gpt_forward picks (session.build_model): use_forward
        self.block_runner: Optional[BlockRunner] = None

    @property
    def gpt(self) -> nn.Module:
        return self.xtts.gpt

    def train(self, mode: bool = True) -> XttsTrainingModel:
        """Only the GPT ever trains; the frozen parts stay in eval mode (dropout off, fixed norms)."""
        super().train(False)
        self.xtts.gpt.train(mode)
        return self

    @torch.no_grad()
    def audio_codes(self, wav: torch.Tensor) -> torch.Tensor:
        """DVAE codes of (B, 1, T) audio at the model's sample rate. Deterministic: safe to cache."""
        if self.xtts.config.audio.sample_rate != self.xtts.config.audio.dvae_sample_rate:
            raise ModelError("base model: audio.sample_rate != audio.dvae_sample_rate is not supported")
        return self.dvae.get_codebook_indices(self.mel_dvae(wav))

    @torch.no_grad()
    def conditioning_mels(self, conditioning: torch.Tensor) -> torch.Tensor:
        """(B, N, 1, T) reference crops -> (B, N, 80, frames)."""
        b, n, c, t = conditioning.shape
        mel = self.mel_style(conditioning.view(b * n, c, t))
        return mel.view(b, n, mel.shape[1], mel.shape[2])

    def use_forward(self, path: str, runner: Optional[BlockRunner] = None) -> None:
        """Which training forward ``forward`` runs: ``fast`` (``gpt_forward.py``, blocks run by ``runner``)
        or ``coqui`` (coqui's ``GPT.forward``: the reference). A GPT the fast forward cannot run stays on coqui's."""
        if path not in ("fast", "coqui"):
            raise ValueError(f"training forward {path!r}: expected 'fast' or 'coqui'")
        problem = check_supported(self.xtts.gpt) if path == "fast" else None
        if problem:
            log.warning("training forward: coqui's (the fast one cannot run this GPT: %s)", problem)
            path = "coqui"
        self.forward_path, self.block_runner = path, runner

    @property
    def compile_seconds(self) -> float:
        """Seconds spent compiling the GPT blocks so far (training.compile; 0 without)."""
        return float(getattr(self.block_runner, "compile_seconds", 0.0))

    def pending_compile_seconds(self) -> float:
        """Compile time still expected (the length buckets not yet met; 0 without training.compile)."""
        pending = getattr(self.block_runner, "pending_seconds", None)
        return float(pending()) if pending else 0.0

    def expect_rows(self, text_tokens: Sequence[int], audio_samples: Sequence[int]) -> None:
        """The clips' text lengths and audio lengths (samples): the compiled blocks' buckets they reach."""
        expect = getattr(self.block_runner, "expect_lengths", None)
        if expect and text_tokens:
            gpt = self.xtts.gpt
            rows = [row_length(gpt, t, a) for t, a in zip(text_tokens, audio_samples)]
            expect(min(rows), max(rows))

    def eager_blocks(self) -> ContextManager[None]:
        """Within it the blocks run uncompiled (the batch-size probe: its many sizes are not worth compiling)."""
        paused = getattr(self.block_runner, "paused", None)
        return paused() if paused else contextlib.nullcontext()

    def forward(
        self,
        text_inputs: torch.Tensor,
        text_lengths: torch.Tensor,
        audio_codes: torch.Tensor,
        wav_lengths: torch.Tensor,
        cond_mels: torch.Tensor,
        cond_idxs: Optional[torch.Tensor] = None,
        cond_lens: Optional[torch.Tensor] = None,
    ) -> dict[str, torch.Tensor]:
        if self.forward_path == "fast" and cond_lens is None:
            loss_text, loss_mel = fast_gpt_losses(self.xtts.gpt, text_inputs, text_lengths, audio_codes, wav_lengths,
                                                  cond_mels, cond_idxs, runner=self.block_runner)
            return weighted_losses(loss_text, loss_mel)
        return weighted_losses(*coqui_gpt_losses(self.xtts.gpt, text_inputs, text_lengths, audio_codes, wav_lengths,
                                                 cond_mels, cond_idxs, cond_lens))


def coqui_gpt_losses(gpt: nn.Module, text_inputs: torch.Tensor, text_lengths: torch.Tensor, audio_codes: torch.Tensor,
                     wav_lengths: torch.Tensor, cond_mels: torch.Tensor, cond_idxs: Optional[torch.Tensor] = None,
                     cond_lens: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(text CE, mel CE) through coqui's ``GPT.forward``, the mel CE recomputed with every row's prompt ignored."""
    loss_text, loss_mel, mel_logits = gpt(
        text_inputs, text_lengths, audio_codes, wav_lengths,
        cond_mels=cond_mels, cond_idxs=None, cond_lens=cond_lens,  # cond_idxs: see the module doc
    )
    if cond_idxs is not None:
        loss_mel = prompt_masked_mel_loss(gpt, mel_logits, audio_codes, wav_lengths, cond_idxs)
    return loss_text, loss_mel


def build_xtts(base: BaseModelFiles, vocab_path: Path, tokenizer: AmharicTokenizer, *,
               load_base_weights: bool = True) -> Xtts:
    """A coqui ``Xtts`` sized for ``vocab_path`` with the base weights loaded (text rows grown)."""
    cfg = load_xtts_config(base.config_json)
    cfg.model_args.tokenizer_file = str(vocab_path)
    xtts = Xtts(cfg)
    xtts.tokenizer = tokenizer
    xtts.init_models()  # sizes the GPT text embedding/head from the (extended) vocab
    if AMHARIC not in cfg.languages:
        cfg.languages = list(cfg.languages) + [AMHARIC]
    if load_base_weights:
        state = base_state_dict(base.model_pth)
        new_size = xtts.gpt.text_embedding.weight.shape[0]
        old_size = state["gpt.text_embedding.weight"].shape[0]
        if old_size > new_size:
            raise ModelError(
                f"{vocab_path}: has {new_size} tokens but the base model has {old_size}; the vocabulary must "
                f"extend the base model's vocab.json ({base.vocab_json})"
            )
        state = resize_text_rows(state, new_size)
        missing, unexpected = xtts.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.startswith("gpt.gpt_inference")]
        if missing or unexpected:
            raise ModelError(
                f"{base.model_pth}: weights do not match the model in {base.config_json} "
                f"(missing {missing[:3]}, unexpected {unexpected[:3]})"
            )
    return xtts


def build_training_model(base: BaseModelFiles, vocab_path: Path, tokenizer: AmharicTokenizer) -> XttsTrainingModel:
    """Everything one training step needs, on CPU; the caller moves it to the device."""
    xtts = build_xtts(base, vocab_path, tokenizer)
    xtts.mel_stats.copy_(load_state_dict_file(base.mel_stats_pth))
    dvae = _build_dvae(base.dvae_pth, xtts.args.gpt_num_audio_tokens)
    return XttsTrainingModel(xtts, dvae, base.mel_stats_pth)


def model_limits(xtts: Xtts) -> dict[str, int]:
    """Token and length limits that data and training must respect."""
    a = xtts.args
    return {
        "max_text_tokens": int(a.gpt_max_text_tokens),
        "max_audio_tokens": int(a.gpt_max_audio_tokens),
        "code_stride": int(a.gpt_code_stride_len),
        "sample_rate": int(xtts.config.audio.sample_rate),
    }


def describe_vocab(vocab_path: Path) -> int:
    data = json.loads(Path(vocab_path).read_text(encoding="utf-8"))
    ids: list[int] = list(data["model"]["vocab"].values()) + [t["id"] for t in data.get("added_tokens", [])]
    return max(ids) + 1

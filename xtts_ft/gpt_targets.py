"""The XTTS GPT's training targets and losses, as coqui builds them, without per-row loops.

coqui's ``GPT.forward`` (``TTS/tts/layers/xtts/gpt.py``, coqui-tts 0.28.0) builds its targets with
Python loops over the rows (``set_mel_padding``, the ``-1`` padding loops), one host sync per row.
These functions compute the same tensors with whole-batch operations:

- text: ``[t_0 .. t_{L-1}, stop]`` per row (the input is ``[start, t_0 .. t_{L-1}]``), ``-1`` after
  position ``L`` (the row's text length), width ``max(L) + 2``;
- mel: the row's codes, the stop token from code ``ceil(wav / stride)`` on, ``-1`` after position
  ``ceil(wav / stride) + 3``, width ``max(ceil(wav / stride) + 3) + 2``;
- the prompt mask (:func:`prompt_masked_mel_loss`): the mel targets whose audio overlaps the row's
  prompt crop are ignored, per row (coqui masks only the last row, see ``xtts_ft/model.py``).

Both training forwards (coqui's, in ``model.py``, and ours, ``gpt_forward.py``) use these, so
the loss they return is the same function of the logits.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

LOSS_TEXT_CE_WEIGHT = 0.01  # coqui GPTArgs.gpt_loss_text_ce_weight
LOSS_MEL_CE_WEIGHT = 1.0  # coqui GPTArgs.gpt_loss_mel_ce_weight


def code_lengths_of(gpt: nn.Module, wav_lengths: torch.Tensor) -> torch.Tensor:
    """Per row: the number of codes of the clip + 3 (coqui's ``code_lengths``)."""
    return torch.ceil(wav_lengths / gpt.code_stride_len).long() + 3


def text_inputs_and_targets(gpt: nn.Module, text_inputs: torch.Tensor, text_lengths: torch.Tensor,
                            max_text_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs ``[start, text.., stop, pad..]``, targets ``[text.., stop, -1..]``), both (B, max_text_len + 2)."""
    text = F.pad(text_inputs[:, :max_text_len], (0, 1), value=gpt.stop_text_token)
    inputs = F.pad(text, (1, 0), value=gpt.start_text_token)
    targets = F.pad(text, (0, 1), value=gpt.stop_text_token).long()
    positions = torch.arange(targets.shape[1], device=targets.device)
    return inputs, targets.masked_fill(positions[None, :] > text_lengths[:, None], -1)


def mel_inputs_and_targets(gpt: nn.Module, audio_codes: torch.Tensor, code_lengths: torch.Tensor,
                           max_mel_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs ``[start, codes.., stop..]``, targets ``[codes.., stop.., -1..]``), both (B, max_mel_len + 2)."""
    if max_mel_len > audio_codes.shape[-1]:
        audio_codes = F.pad(audio_codes, (0, max_mel_len - audio_codes.shape[-1]))
    codes = F.pad(audio_codes[:, :max_mel_len], (0, 1), value=gpt.stop_audio_token)
    positions = torch.arange(codes.shape[1], device=codes.device)
    codes = codes.masked_fill(positions[None, :] >= (code_lengths - 3)[:, None], gpt.stop_audio_token)
    inputs = F.pad(codes, (1, 0), value=gpt.start_audio_token)
    targets = F.pad(codes, (0, 1), value=gpt.stop_audio_token).long()
    positions = torch.arange(targets.shape[1], device=targets.device)
    return inputs, targets.masked_fill(positions[None, :] > code_lengths[:, None], -1)


def mel_targets(gpt: nn.Module, audio_codes: torch.Tensor, wav_lengths: torch.Tensor) -> torch.Tensor:
    """The GPT's mel targets (B, T) as coqui builds them: codes, stop tokens after each clip, -1 padding."""
    code_lengths = code_lengths_of(gpt, wav_lengths)
    return mel_inputs_and_targets(gpt, audio_codes, code_lengths, int(code_lengths.max()))[1]


def mask_prompt(gpt: nn.Module, targets: torch.Tensor, cond_idxs: torch.Tensor) -> torch.Tensor:
    """``targets`` with every row's prompt ignored (-1): the codes whose audio overlaps its crop.

    ``cond_idxs`` (B, 2): each row's prompt crop [start, end) in samples of the target clip.
    """
    stride = gpt.code_stride_len
    idxs = cond_idxs.to(targets.device).long()
    first = torch.div(idxs[:, 0], stride, rounding_mode="floor")
    end = torch.div(idxs[:, 1] + stride - 1, stride, rounding_mode="floor")
    positions = torch.arange(targets.shape[1], device=targets.device)[None, :]
    in_prompt = (positions >= first[:, None]) & (positions < end[:, None])
    return targets.masked_fill(in_prompt, -1)


def mel_loss(gpt: nn.Module, mel_logits: torch.Tensor, targets: torch.Tensor,
             cond_idxs: Optional[torch.Tensor]) -> torch.Tensor:
    """Mel cross-entropy of (B, V, T) logits; with ``cond_idxs`` each row's prompt is ignored."""
    if cond_idxs is not None:
        targets = mask_prompt(gpt, targets, cond_idxs)
    return F.cross_entropy(mel_logits, targets, ignore_index=-1, label_smoothing=gpt.label_smoothing)


def prompt_masked_mel_loss(gpt: nn.Module, mel_logits: torch.Tensor, audio_codes: torch.Tensor,
                           wav_lengths: torch.Tensor, cond_idxs: torch.Tensor) -> torch.Tensor:
    """Mel cross-entropy with every row's prompt ignored (see :func:`mask_prompt`)."""
    return mel_loss(gpt, mel_logits, mel_targets(gpt, audio_codes, wav_lengths), cond_idxs)


def weighted_losses(loss_text: torch.Tensor, loss_mel: torch.Tensor) -> dict[str, torch.Tensor]:
    """The training model's loss dict (coqui GPTTrainer's weights)."""
    text = loss_text * LOSS_TEXT_CE_WEIGHT
    mel = loss_mel * LOSS_MEL_CE_WEIGHT
    return {"loss": text + mel, "loss_text_ce": text, "loss_mel_ce": mel}

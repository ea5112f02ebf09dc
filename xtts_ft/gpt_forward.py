"""The XTTS GPT's training forward, laid out for speed: the same losses and gradients as coqui's.

coqui's ``GPT.forward`` (coqui-tts 0.28.0, ``TTS/tts/layers/xtts/gpt.py``) lays each row out as
``[conditioning][text + padding][audio + padding]`` and hands Hugging Face's GPT-2 a 2-D padding
mask, so every padded batch gets a materialised (B, 1, T, T) attention mask and SDPA leaves its
flash path; it also fills a KV cache nobody reads (``use_cache``), runs ``gelu_new`` as several
element-wise kernels and loops over the rows with host syncs. :func:`fast_gpt_losses` computes the
same function of the same weights:

- each row is laid out ``[conditioning][text][audio][padding]``: its text and audio positions keep
  their own position embeddings (the position ids are unchanged), and since every real position
  comes before every padded one, plain causal attention (``is_causal=True``, no mask) lets a real
  position see exactly the real positions before it, as coqui's mask does; what the padded
  positions compute is never read (their targets are ignored, nothing after them is real);
- the GPT-2 blocks of coqui's model run here (:func:`block_forward`), with their own modules
  (LoRA adapters injected into them run too), ``F.gelu(approximate="tanh")`` for ``gelu_new``
  (the same function) and no cache; ``training.gradient_checkpointing`` (Hugging Face's flag on
  the GPT-2 model) recomputes each block in backward as Hugging Face's would;
- the targets and the prompt mask come from ``gpt_targets.py`` (no per-row loops); one host sync
  per call reads the lengths that size the batch.

Dropout draws other random numbers than coqui's (the tensors are laid out differently), so the two
paths are equal with dropout off (eval mode, or p = 0) and equal in distribution with it on.
Inference and export never use this module: coqui's own forward and generation stay as they are.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, Optional, Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from xtts_ft.gpt_targets import code_lengths_of, mel_inputs_and_targets, mel_loss, text_inputs_and_targets

BlockFn = Callable[[nn.Module, torch.Tensor], torch.Tensor]


class BlockRunner(Protocol):
    """How the GPT-2 blocks run: eager (:class:`EagerBlocks`) or compiled (``gpt_compile.CompiledBlocks``)."""

    def padded_length(self, length: int) -> int: ...

    def run(self, blocks: nn.ModuleList, x: torch.Tensor, *, checkpointing: bool) -> torch.Tensor: ...


def _activation(block: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    name = getattr(block.attn.config, "activation_function", None)
    if name == "gelu_new":  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): torch's tanh GELU, one kernel
        return functools.partial(F.gelu, approximate="tanh")
    return block.mlp.act


def block_forward(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """One Hugging Face ``GPT2Block`` (self-attention only) over (B, T, C), causal, without mask or cache."""
    attn, mlp = block.attn, block.mlp
    b, t, c = x.shape
    q, k, v = attn.c_attn(block.ln_1(x)).split(attn.split_size, dim=2)
    q, k, v = (z.view(b, t, attn.num_heads, attn.head_dim).transpose(1, 2) for z in (q, k, v))
    dropout = attn.attn_dropout.p if attn.training else 0.0
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, scale=attn.scaling)
    x = x + attn.resid_dropout(attn.c_proj(a.transpose(1, 2).reshape(b, t, c)))
    return x + mlp.dropout(mlp.c_proj(_activation(block)(mlp.c_fc(block.ln_2(x)))))


def run_blocks(fn: BlockFn, blocks: nn.ModuleList, x: torch.Tensor, *, checkpointing: bool) -> torch.Tensor:
    """``fn`` over every block; ``checkpointing``: each block recomputed in backward (its RNG state kept)."""
    for block in blocks:
        if checkpointing:
            x = checkpoint(fn, block, x, use_reentrant=False)
        else:
            x = fn(block, x)
    return x


class EagerBlocks:
    """The blocks as they are (no length padding)."""

    def padded_length(self, length: int) -> int:
        return length

    def run(self, blocks: nn.ModuleList, x: torch.Tensor, *, checkpointing: bool) -> torch.Tensor:
        return run_blocks(block_forward, blocks, x, checkpointing=checkpointing)


EAGER = EagerBlocks()


def check_supported(gpt: nn.Module) -> Optional[str]:
    """Why ``gpt`` cannot take the fast forward (one line), or None."""
    hf = gpt.gpt
    if not isinstance(hf.wpe, functools.partial):
        return "the GPT-2 model has learned absolute position embeddings (coqui's XTTS replaces them)"
    if getattr(hf.config, "add_cross_attention", False):
        return "the GPT-2 model has cross-attention"
    if not isinstance(gpt.text_solo_embedding, int) or not isinstance(gpt.mel_solo_embedding, int):
        return "train_solo_embeddings is on"
    return None


def row_length(gpt: nn.Module, text_tokens: int, audio_samples: int) -> int:
    """Positions of one clip's row: conditioning + [start, text..] + [start, codes.., stop x 3]."""
    cond = gpt.conditioning_perceiver.latents.shape[0] if gpt.use_perceiver_resampler else gpt.max_prompt_tokens
    return int(cond + text_tokens + 1 + math.ceil(audio_samples / gpt.code_stride_len) + 3 + 1)


def _layout(cond: int, text_real: torch.Tensor, mel_real: torch.Tensor, text_width: int, length: int
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather indices: (B, length) into ``[cond][text (text_width)][mel]`` for ``[cond][text][mel][pad]``,
    and (B, mel width) of each row's mel positions in the new layout."""
    device = text_real.device
    p = torch.arange(length, device=device)[None, :]
    text_end = cond + text_real[:, None]  # first mel position of each row in the new layout
    source = torch.where(p < text_end, p, p - text_end + cond + text_width)
    real = p < text_end + mel_real[:, None]
    source = torch.where(real, source, torch.zeros_like(source))  # padding: any row position (never read)
    return source, text_end


def fast_gpt_losses(gpt: nn.Module, text_inputs: torch.Tensor, text_lengths: torch.Tensor,
                    audio_codes: torch.Tensor, wav_lengths: torch.Tensor, cond_mels: torch.Tensor,
                    cond_idxs: Optional[torch.Tensor] = None, *, runner: Optional[BlockRunner] = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(text CE, mel CE) of coqui's GPT on a padded batch; the mel CE ignores each row's prompt with ``cond_idxs``.

    The same arguments as coqui's ``GPT.forward`` (``cond_mels`` (B, 1, 80, frames)); ``runner``: how the
    blocks run (default eager).
    """
    runner = runner or EAGER
    hf = gpt.gpt
    code_lengths = code_lengths_of(gpt, wav_lengths)
    text_real, mel_real = text_lengths.long() + 1, code_lengths + 1  # [start, text..] / [start, codes.., stop..]
    cond_latents = gpt.get_style_emb(cond_mels).transpose(1, 2)  # (B, cond, C)
    cond = cond_latents.shape[1]
    max_text, max_mel, longest = (int(v) for v in torch.stack(
        [text_lengths.max().long(), code_lengths.max(), (text_real + mel_real).max()]).tolist())  # the one sync
    text_in, text_targets = text_inputs_and_targets(gpt, text_inputs, text_lengths, max_text)
    mel_in, mel_targets = mel_inputs_and_targets(gpt, audio_codes, code_lengths, max_mel)
    text_emb = gpt.text_embedding(text_in) + gpt.text_pos_embedding(text_in)
    mel_emb = gpt.mel_embedding(mel_in) + gpt.mel_pos_embedding(mel_in)
    coqui_rows = torch.cat([cond_latents, text_emb, mel_emb], dim=1)
    width = coqui_rows.shape[-1]
    length = runner.padded_length(cond + longest)
    source, mel_start = _layout(cond, text_real, mel_real, text_emb.shape[1], length)
    x = torch.gather(coqui_rows, 1, source[:, :, None].expand(-1, -1, width))
    x = hf.drop(x)  # the GPT-2 model's embedding dropout (its position embeddings are zeros in XTTS)
    x = runner.run(hf.h, x, checkpointing=bool(getattr(hf, "gradient_checkpointing", False)) and hf.training)
    enc = gpt.final_norm(hf.ln_f(x))
    text_logits = gpt.text_head(enc[:, cond:cond + text_emb.shape[1]])  # text keeps coqui's positions
    mel_pos = (mel_start + torch.arange(mel_emb.shape[1], device=x.device)[None, :]).clamp(max=length - 1)
    mel_hidden = torch.gather(enc, 1, mel_pos[:, :, None].expand(-1, -1, width))  # padding rows: ignored targets
    mel_logits = gpt.mel_head(mel_hidden)
    loss_text = F.cross_entropy(text_logits.permute(0, 2, 1), text_targets, ignore_index=-1,
                                label_smoothing=gpt.label_smoothing)
    return loss_text, mel_loss(gpt, mel_logits.permute(0, 2, 1), mel_targets, cond_idxs)

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
  per call reads the lengths that size the batch;
- every module coqui's forward calls has its forward hooks run here too (:func:`hooked`), also where
  its computation is ours (GPT-2's attention and MLP, the GPT itself): the stability layer's
  diagnosis of a non-finite batch and the tests' fault injection work on both forwards.

Dropout draws other random numbers than coqui's (the tensors are laid out differently), so the two
paths are equal with dropout off (eval mode, or p = 0) and equal in distribution with it on.
Inference and export never use this module: coqui's own forward and generation stay as they are.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Callable, Optional, Protocol, TypeVar

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from xtts_ft.gpt_targets import code_lengths_of, mel_inputs_and_targets, mel_loss, text_inputs_and_targets

if TYPE_CHECKING:  # Python 3.11's typing names; the package runs on 3.10, where annotations are never evaluated
    from typing import TypeVarTuple, Unpack

    Args = TypeVarTuple("Args")  # what a hooked computation takes (a pre-hook that replaces them gives the same kinds)

BlockFn = Callable[[nn.Module, torch.Tensor], torch.Tensor]
Out = TypeVar("Out")  # what a hooked computation gives (a forward hook that replaces it gives the same kind)


class BlockRunner(Protocol):
    """How the GPT-2 blocks run: eager (:class:`EagerBlocks`) or compiled (``gpt_compile.CompiledBlocks``)."""

    def padded_length(self, length: int) -> int: ...

    def run(self, blocks: nn.ModuleList, x: torch.Tensor, *, checkpointing: bool) -> torch.Tensor: ...


def hooked(module: nn.Module, fn: Callable[[Unpack[Args]], Out], *args: Unpack[Args]) -> Out:
    """``fn(*args)`` run as ``module(*args)`` would run: the module's forward pre-hooks and forward hooks around it.

    The fast forward computes what a module computes without calling its ``forward`` (GPT-2's attention
    and MLP, coqui's GPT); hooks still see the module's input and output (the stability layer's
    diagnosis watches every module's output; tests inject faults with them). Output shapes follow
    coqui's: the attention gives ``(output, None)``, the GPT ``(loss_text, loss_mel, mel_logits)``, the
    GPT-2 model its last hidden state (a tensor, not a ``ModelOutput``).
    """
    if not (module._forward_pre_hooks or module._forward_hooks):
        return fn(*args)
    for hook_id, hook in list(module._forward_pre_hooks.items()):
        if hook_id in module._forward_pre_hooks_with_kwargs:
            result = hook(module, args, {})
            result = result[0] if result is not None else None
        else:
            result = hook(module, args)
        if result is not None:
            args = result if isinstance(result, tuple) else (result,)
    output = fn(*args)
    for hook_id, hook in list(module._forward_hooks.items()):
        if hook_id in module._forward_hooks_with_kwargs:
            result = hook(module, args, {}, output)
        else:
            result = hook(module, args, output)
        if result is not None:
            output = result
    return output


def any_hooks(module: nn.Module) -> bool:
    """Whether ``module`` or one inside it has forward hooks (then the compiled blocks step aside)."""
    return any(m._forward_hooks or m._forward_pre_hooks for m in module.modules())


def _attention(attn: nn.Module, h: torch.Tensor) -> tuple[torch.Tensor, None]:
    """GPT2Attention on (B, T, C), causal without a mask or cache; ``(output, None)`` as Hugging Face returns it."""
    b, t, c = h.shape
    q, k, v = attn.c_attn(h).split(attn.split_size, dim=2)
    q, k, v = (z.view(b, t, attn.num_heads, attn.head_dim).transpose(1, 2) for z in (q, k, v))
    dropout = attn.attn_dropout.p if attn.training else 0.0
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, scale=attn.scaling)
    return attn.resid_dropout(attn.c_proj(a.transpose(1, 2).reshape(b, t, c))), None


def _tanh_gelu(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


def _mlp(mlp: nn.Module, h: torch.Tensor) -> torch.Tensor:
    h = mlp.c_fc(h)
    if type(mlp.act).__name__ == "NewGELUActivation":  # gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        h = hooked(mlp.act, _tanh_gelu, h)  # ... is torch's tanh GELU, one kernel instead of several
    else:
        h = mlp.act(h)
    return mlp.dropout(mlp.c_proj(h))


def _block(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    x = x + hooked(block.attn, _attention, block.attn, block.ln_1(x))[0]
    return x + hooked(block.mlp, _mlp, block.mlp, block.ln_2(x))


def block_forward(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """One Hugging Face ``GPT2Block`` (self-attention only) over (B, T, C), causal, without mask or cache."""
    return hooked(block, functools.partial(_block, block), x)


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


def conditioning_length(gpt: nn.Module) -> int:
    """Positions the voice prompt takes at the start of every row: the perceiver's latents, or coqui's prompt tokens
    without the perceiver."""
    return int(gpt.conditioning_perceiver.latents.shape[0] if gpt.use_perceiver_resampler else gpt.max_prompt_tokens)


def row_length(gpt: nn.Module, text_tokens: int, audio_samples: int) -> int:
    """Positions of one clip's row: conditioning + [start, text..] + [start, codes.., stop x 3]."""
    return conditioning_length(gpt) + text_tokens + 1 + math.ceil(audio_samples / int(gpt.code_stride_len)) + 3 + 1


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
    blocks run (default eager). Hooks on ``gpt`` see ``(text_inputs, text_lengths, audio_codes, wav_lengths)``
    and ``(loss_text, loss_mel, mel_logits)`` as with coqui's forward (its ``loss_mel``: this one's).
    """
    def run(text: torch.Tensor, text_lens: torch.Tensor, codes: torch.Tensor, wav_lens: torch.Tensor
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return _losses(gpt, text, text_lens, codes, wav_lens, cond_mels, cond_idxs, runner or EAGER)

    loss_text, loss_mel, _ = hooked(gpt, run, text_inputs, text_lengths, audio_codes, wav_lengths)
    return loss_text, loss_mel


def _losses(gpt: nn.Module, text_inputs: torch.Tensor, text_lengths: torch.Tensor, audio_codes: torch.Tensor,
            wav_lengths: torch.Tensor, cond_mels: torch.Tensor, cond_idxs: Optional[torch.Tensor],
            runner: BlockRunner) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
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

    def transformer() -> torch.Tensor:  # GPT2Model: its position embeddings are zeros in XTTS
        checkpointing = bool(getattr(hf, "gradient_checkpointing", False)) and hf.training
        return hf.ln_f(runner.run(hf.h, hf.drop(x), checkpointing=checkpointing))

    enc = gpt.final_norm(hooked(hf, transformer))
    text_logits = gpt.text_head(enc[:, cond:cond + text_emb.shape[1]])  # text keeps coqui's positions
    mel_pos = (mel_start + torch.arange(mel_emb.shape[1], device=x.device)[None, :]).clamp(max=length - 1)
    mel_hidden = torch.gather(enc, 1, mel_pos[:, :, None].expand(-1, -1, width))  # padding rows: ignored targets
    mel_logits = gpt.mel_head(mel_hidden).permute(0, 2, 1)  # (B, V, T) as coqui's
    loss_text = F.cross_entropy(text_logits.permute(0, 2, 1), text_targets, ignore_index=-1,
                                label_smoothing=gpt.label_smoothing)
    return loss_text, mel_loss(gpt, mel_logits, mel_targets, cond_idxs), mel_logits

"""XTTS's GPT decoded for many requests at once, one code per request per step, with its KV cache.

coqui generates one utterance at a time (``Xtts.inference`` -> ``GPT.generate`` -> transformers'
``generate``); there is no batched inference (coqui-ai/TTS #4140, #3776). This is a small decoder of
our own over the same modules (``gpt.gpt``, the GPT2 blocks; ``mel_embedding``, ``mel_pos_embedding``,
``final_norm``, ``mel_head``), which serves the speech server's continuous batching and the
evaluation's batches:

- a request is *prefilled* alone (its conditioning latents, text and start code in one forward
  pass, exactly as coqui's first generation step) and *joins* the batch at the next step: its KV
  cache is left-padded to the batch's length (or the batch's to its) and the attention mask hides
  the padding. coqui's GPT2 has no position embedding inside the blocks (``wpe`` returns zeros), the
  audio position is added to each row's input embedding, so left padding changes no position;
- every step feeds each row its last code at its own position and samples each row on its own,
  with its own settings and its own ``torch.Generator``: a row's codes do not depend on who else is
  in the batch (up to float rounding of a padded attention; greedy decoding gives the same codes);
- a finished (stop code or its code limit) or cancelled row *leaves*: its cache rows are dropped and
  columns that only held padding are trimmed.

Sampling repeats transformers' ``generate`` with coqui's arguments exactly (repetition penalty over
the whole input, which in coqui holds ``prefix_len`` dummy ids 1 and the start code, then temperature,
top-k, top-p and ``torch.multinomial``), so a request alone gives the codes of ``Xtts.inference`` for the
same seed (tests/evaluate/test_batch_decode.py, and the golden codes in tests/assets/).

Each generated code comes with its *latent* (the final-normed hidden state that predicted it): what
coqui recomputes with a second forward pass and hands to HiFiGAN.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.generation.logits_process import (
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)


@dataclass(frozen=True)
class Sampling:
    """One request's decoding settings; the defaults are ``Xtts.inference``'s."""

    temperature: float = 0.75
    top_k: int = 50
    top_p: float = 0.85
    repetition_penalty: float = 10.0
    do_sample: bool = True

    def choose(self, scores: torch.Tensor, seen: torch.Tensor, generator: torch.Generator) -> int:
        """The next code from one row's logits ``scores`` (1, vocab) as transformers' ``generate`` samples it."""
        scores = scores.to(dtype=torch.float32)
        if self.repetition_penalty != 1.0:
            scores = RepetitionPenaltyLogitsProcessor(self.repetition_penalty)(seen, scores)
        if not self.do_sample:
            return int(torch.argmax(scores, dim=-1))
        if self.temperature != 1.0:
            scores = TemperatureLogitsWarper(self.temperature)(seen, scores)
        if self.top_k:
            scores = TopKLogitsWarper(top_k=self.top_k)(seen, scores)
        if self.top_p < 1.0:
            scores = TopPLogitsWarper(top_p=self.top_p)(seen, scores)
        probs = F.softmax(scores, dim=-1)
        return int(torch.multinomial(probs, num_samples=1, generator=generator))


@dataclass
class DecodeRequest:
    """One utterance to decode; the decoder appends to ``codes``/``latents`` and sets ``done``."""

    prefix: torch.Tensor  # (1, P, D): conditioning latents + text embeddings (see prefix_embeddings)
    max_codes: int
    sampling: Sampling
    seed: int
    codes: list[int] = field(default_factory=list)
    latents: list[torch.Tensor] = field(default_factory=list)  # (D,) each, one per code
    ended_with_stop: bool = False
    done: bool = False
    generator: Optional[torch.Generator] = None

    def __post_init__(self) -> None:
        self.generator = torch.Generator(device=self.prefix.device).manual_seed(int(self.seed))


def prefix_embeddings(gpt, cond_latents: torch.Tensor, text_tokens: torch.Tensor) -> torch.Tensor:
    """coqui's ``GPT.compute_embeddings`` without storing anything on the model: [cond][start text stop]."""
    text = F.pad(text_tokens, (0, 1), value=gpt.stop_text_token)
    text = F.pad(text, (1, 0), value=gpt.start_text_token)
    emb = gpt.text_embedding(text) + gpt.text_pos_embedding(text)
    return torch.cat([cond_latents.to(emb.dtype), emb], dim=1)


class BatchDecoder:
    """The rows being decoded and their joint KV cache. Not thread-safe: one thread drives it."""

    def __init__(self, gpt) -> None:
        self.gpt = gpt
        self.rows: list[DecodeRequest] = []
        self._seen: list[set[int]] = []
        self._keys: list[torch.Tensor] = []  # per layer (B, H, T, Dh)
        self._values: list[torch.Tensor] = []
        self._mask: Optional[torch.Tensor] = None  # (B, T): 1 for real positions, 0 for left padding

    def __len__(self) -> int:
        return len(self.rows)

    # --- joining -----------------------------------------------------------------------------
    def join(self, request: DecodeRequest) -> None:
        """Prefill ``request`` alone, choose its first code and add it to the batch (or finish it)."""
        gpt = self.gpt
        start = torch.full((1, 1), gpt.start_audio_token, dtype=torch.long, device=request.prefix.device)
        start_emb = gpt.mel_embedding(start) + gpt.mel_pos_embedding(start)
        emb = torch.cat([request.prefix, start_emb], dim=1)
        cache = DynamicCache()
        mask = torch.ones(1, emb.shape[1], dtype=torch.long, device=emb.device)
        out = gpt.gpt(inputs_embeds=emb, past_key_values=cache, attention_mask=mask, use_cache=True, return_dict=True)
        seen = {1, int(gpt.start_audio_token)}  # coqui's generate input: prefix_len ids 1, then the start code
        self._accept(request, seen, out.last_hidden_state[:, -1])
        if request.done:
            return
        keys = [layer.keys for layer in out.past_key_values.layers]
        values = [layer.values for layer in out.past_key_values.layers]
        if not self.rows:
            self._keys, self._values, self._mask = keys, values, mask
        else:
            width = max(self._mask.shape[1], mask.shape[1])
            self._keys = [torch.cat([_left_pad(a, width), _left_pad(b, width)]) for a, b in zip(self._keys, keys)]
            self._values = [torch.cat([_left_pad(a, width), _left_pad(b, width)])
                            for a, b in zip(self._values, values)]
            self._mask = torch.cat([_left_pad(self._mask, width, dim=1), _left_pad(mask, width, dim=1)])
        self.rows.append(request)
        self._seen.append(seen)

    # --- stepping ----------------------------------------------------------------------------
    def step(self) -> None:
        """One code for every row; rows that finish leave the batch."""
        if not self.rows:
            return
        gpt = self.gpt
        device = self._mask.device
        last = torch.tensor([r.codes[-1] for r in self.rows], dtype=torch.long, device=device)
        position = torch.tensor([len(r.codes) for r in self.rows], dtype=torch.long, device=device)
        emb = (gpt.mel_embedding(last) + gpt.mel_pos_embedding.emb(position)).unsqueeze(1)
        mask = torch.cat([self._mask, torch.ones_like(self._mask[:, :1])], dim=1)
        cache = DynamicCache()
        for i, (k, v) in enumerate(zip(self._keys, self._values)):
            cache.update(k, v, i)
        out = gpt.gpt(inputs_embeds=emb, past_key_values=cache, attention_mask=mask, use_cache=True, return_dict=True)
        self._keys = [layer.keys for layer in out.past_key_values.layers]
        self._values = [layer.values for layer in out.past_key_values.layers]
        self._mask = mask
        hidden = out.last_hidden_state[:, -1]
        for i, (request, seen) in enumerate(zip(self.rows, self._seen)):
            self._accept(request, seen, hidden[i : i + 1])
        self.drop([r for r in self.rows if r.done])

    def _accept(self, request: DecodeRequest, seen: set[int], hidden: torch.Tensor) -> None:
        latent = self.gpt.final_norm(hidden)
        logits = self.gpt.mel_head(latent)
        seen_ids = torch.tensor([sorted(seen)], dtype=torch.long, device=logits.device)
        code = request.sampling.choose(logits, seen_ids, request.generator)
        request.codes.append(code)
        request.latents.append(latent[0])
        seen.add(code)
        if code == int(self.gpt.stop_audio_token):
            request.ended_with_stop = True
            request.done = True
        elif len(request.codes) >= request.max_codes:
            request.done = True

    # --- leaving -----------------------------------------------------------------------------
    def drop(self, requests: list[DecodeRequest]) -> None:
        """Remove ``requests`` (finished or cancelled) from the batch; padding no row needs is trimmed."""
        if not requests:
            return
        gone = {id(r) for r in requests}
        keep = [i for i, r in enumerate(self.rows) if id(r) not in gone]
        self.rows = [self.rows[i] for i in keep]
        self._seen = [self._seen[i] for i in keep]
        if not keep:
            self._keys, self._values, self._mask = [], [], None
            return
        index = torch.tensor(keep, dtype=torch.long, device=self._mask.device)
        mask = self._mask.index_select(0, index)
        used = mask.any(dim=0).nonzero()
        first = int(used[0]) if used.numel() else 0
        self._mask = mask[:, first:]
        self._keys = [k.index_select(0, index)[:, :, first:] for k in self._keys]
        self._values = [v.index_select(0, index)[:, :, first:] for v in self._values]


def _left_pad(t: torch.Tensor, width: int, dim: int = 2) -> torch.Tensor:
    missing = width - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def decode_all(gpt, requests: list[DecodeRequest], max_batch: Optional[int] = None) -> None:
    """Decode ``requests`` to the end in batches of at most ``max_batch`` rows (new ones join as others finish)."""
    decoder = BatchDecoder(gpt)
    waiting = list(requests)
    while waiting or decoder.rows:
        while waiting and (max_batch is None or len(decoder) < max_batch):
            decoder.join(waiting.pop(0))
        decoder.step()

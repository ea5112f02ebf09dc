"""The batched decoder as it was first written, kept as the oracle and the baseline of the faster one.

:class:`xtts_ft.inference.batch_decode.BatchDecoder` computes the same codes and latents with its cache
written in place (:mod:`.decode_cache`) and one read of the codes per step. This one hands Hugging
Face's ``GPT2Model`` a ``DynamicCache`` rebuilt at every step (which concatenates every layer's keys
and values with the new column), pads the whole cache again when a request joins, and runs the
output head and transformers' logits processors row by row with a host read per row. The tests
compare the two (tests/inference/test_batch_decode.py) and ``benchmarks/decode_step.py`` measures both
in one run; nothing in the product calls this module.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

from xtts_ft.inference.batch_decode import DecodeRequest, Sampling, prefill, staying


def choose_one(sampling: Sampling, scores: torch.Tensor, seen: torch.Tensor, generator: torch.Generator) -> int:
    """One row's next code from its logits (1, vocab) and its input ids ``seen`` (1, n), as ``generate`` does it."""
    scores = scores.to(dtype=torch.float32)
    if sampling.repetition_penalty != 1.0:
        scores = RepetitionPenaltyLogitsProcessor(sampling.repetition_penalty)(seen, scores)
    if not sampling.do_sample:
        return int(torch.argmax(scores, dim=-1))
    probs = F.softmax(sampling.warp(scores), dim=-1)
    return int(torch.multinomial(probs, num_samples=1, generator=generator))


class ReferenceDecoder:
    """The first batched decoder: the cache concatenated at every step, each row chosen on its own."""

    def __init__(self, gpt: torch.nn.Module) -> None:
        self.gpt = gpt
        self.rows: list[DecodeRequest] = []
        self._seen: list[set[int]] = []
        self._keys: list[torch.Tensor] = []  # per layer (B, H, T, Dh)
        self._values: list[torch.Tensor] = []
        self._mask: Optional[torch.Tensor] = None  # (B, T): 1 for real positions, 0 for left padding

    def __len__(self) -> int:
        return len(self.rows)

    def _rows_mask(self) -> torch.Tensor:
        """The batch's mask, read only while the batch has rows (which always have one)."""
        assert self._mask is not None, "the batch has no rows"
        return self._mask

    # --- joining -----------------------------------------------------------------------------
    def join(self, request: DecodeRequest) -> None:
        """Prefill ``request`` alone, choose its first code and add it to the batch (or finish it)."""
        hidden, keys, values, _ = prefill(self.gpt, [request.prefix])
        mask = torch.ones(1, keys[0].shape[2], dtype=torch.long, device=hidden.device)
        seen = {1, int(self.gpt.start_audio_token)}  # coqui's generate input: prefix_len ids 1, then the start code
        self._accept(request, seen, hidden)
        if request.done:
            return
        if not self.rows:
            self._keys, self._values, self._mask = keys, values, mask
        else:
            width = max(self._rows_mask().shape[1], mask.shape[1])
            self._keys = [torch.cat([_left_pad(a, width), _left_pad(b, width)]) for a, b in zip(self._keys, keys)]
            self._values = [torch.cat([_left_pad(a, width), _left_pad(b, width)])
                            for a, b in zip(self._values, values)]
            self._mask = torch.cat([_left_pad(self._rows_mask(), width, dim=1), _left_pad(mask, width, dim=1)])
        self.rows.append(request)
        self._seen.append(seen)

    # --- stepping ----------------------------------------------------------------------------
    def step(self) -> None:
        """One code for every row; rows that finish leave the batch."""
        if not self.rows:
            return
        gpt = self.gpt
        device = self._rows_mask().device
        last = torch.tensor([r.codes[-1] for r in self.rows], dtype=torch.long, device=device)
        position = torch.tensor([len(r.codes) for r in self.rows], dtype=torch.long, device=device)
        emb = (gpt.mel_embedding(last) + gpt.mel_pos_embedding.emb(position)).unsqueeze(1)
        mask = torch.cat([self._rows_mask(), torch.ones_like(self._rows_mask()[:, :1])], dim=1)
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
        code = choose_one(request.sampling, logits, seen_ids, request.generator)
        request.take(code, latent[0], int(self.gpt.stop_audio_token))
        seen.add(code)

    # --- leaving -----------------------------------------------------------------------------
    def drop(self, requests: list[DecodeRequest]) -> None:
        """Remove ``requests`` (finished or cancelled) from the batch; padding no row needs is trimmed."""
        if not requests:
            return
        keep = staying(self.rows, requests)
        self.rows = [self.rows[i] for i in keep]
        self._seen = [self._seen[i] for i in keep]
        if not keep:
            self._keys, self._values, self._mask = [], [], None
            return
        index = torch.tensor(keep, dtype=torch.long, device=self._rows_mask().device)
        mask = self._rows_mask().index_select(0, index)
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

"""XTTS's GPT decoded for many requests at once, one code per request per step, with its KV cache.

coqui generates one utterance at a time (``Xtts.inference`` -> ``GPT.generate`` -> transformers'
``generate``); there is no batched inference (coqui-ai/TTS #4140, #3776). This is a small decoder of
our own over the same modules (``gpt.gpt``, the GPT2 blocks; ``mel_embedding``, ``mel_pos_embedding``,
``final_norm``, ``mel_head``), which serves the speech server's continuous batching and the
evaluation's batches:

- a request is *prefilled* alone (its conditioning latents, text and start code in one forward
  pass through Hugging Face's ``GPT2Model``, exactly as coqui's first generation step) and *joins*
  the batch at the next step: its keys and values are copied into the batch's cache
  (:class:`.decode_cache.SlotCache`, written in place, rows of different lengths left-padded and
  the padding masked). coqui's GPT2 has no position embedding inside the blocks (``wpe`` returns
  zeros), the audio position is added to each row's input embedding, so left padding changes no
  position;
- every step feeds each row its last code at its own position through the GPT-2 blocks once for all
  rows, and chooses each row's code with its own settings and its own ``torch.Generator``
  (:meth:`Sampling.choose`; rows that share settings are processed together, each drawn alone): a
  row's codes do not depend on who else is in the batch (up to float rounding of a padded attention;
  greedy decoding gives the same codes). The codes come back to the host once per step;
- a finished (stop code or its code limit) or cancelled row *leaves*: the rows after it move up in
  the cache and columns that only held padding fall out of the attended window.

The first version of this decoder (kept as :mod:`.batch_decode_reference`, the tests' oracle and the
baseline of ``benchmarks/decode_step.py``) rebuilt a ``DynamicCache`` at every step and chose row by
row; this one gives the same codes and latents, bit for bit on the CPU
(tests/inference/test_batch_decode.py).

Sampling repeats transformers' ``generate`` with coqui's arguments exactly (repetition penalty over
the whole input, which in coqui holds ``prefix_len`` dummy ids 1 and the start code, then temperature,
top-k, top-p and ``torch.multinomial``'s draw, :func:`draw`), so a request alone gives the codes of ``Xtts.inference`` for the
same seed (tests/inference/test_batch_decode.py, and the golden codes in tests/assets/).

Each generated code comes with its *latent* (the final-normed hidden state that predicted it): what
coqui recomputes with a second forward pass and hands to HiFiGAN.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.generation.logits_process import (
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from xtts_ft.inference.decode_cache import SlotCache, host_to_device, indices, unsupported
from xtts_ft.inference.decode_graph import FixedShapeStep, StaticSlotCache
from xtts_ft.inference.head_graph import FixedShapeHead, latents_and_logits
from xtts_ft.inference.prefill_graph import FixedShapePrefill, Prefilled, gathered, padded_prefill, right_padded
from xtts_ft.inference.step_in_flight import InFlight


@dataclass(frozen=True)
class Sampling:
    """One request's decoding settings; the defaults are ``Xtts.inference``'s."""

    temperature: float = 0.75
    top_k: int = 50
    top_p: float = 0.85
    repetition_penalty: float = 10.0
    do_sample: bool = True

    def choose(self, scores: torch.Tensor, seen: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
        """The next code of each row (rows,) from its logits ``scores`` (rows, vocab), as transformers' ``generate``
        samples it for that row alone. ``seen`` (rows, vocab) marks the ids already in each row's input.

        The repetition penalty is transformers' (``where(score < 0, score * p, score / p)`` at the seen ids),
        applied through the mask instead of a gather and scatter of the ids: the same numbers. The warpers run
        on all rows at once (each works row by row); each row is drawn with its own generator.
        """
        return self.pick(self.distribution(scores, seen), generators)

    def distribution(self, scores: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
        """What :meth:`pick` chooses from (rows, vocab): the probabilities after the penalty and the warpers when
        sampling, the penalised scores when greedy. No host read and no randomness: the part of the choice that
        :mod:`.head_graph` records."""
        scores = scores.to(dtype=torch.float32)
        if self.repetition_penalty != 1.0:
            p = self.repetition_penalty
            scores = torch.where(seen, torch.where(scores < 0, scores * p, scores / p), scores)
        if not self.do_sample:
            return scores
        return F.softmax(self.warp(scores), dim=-1)

    def pick(self, distribution: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
        """Each row's code from its :meth:`distribution`: drawn with its own generator, or the best when greedy."""
        if not self.do_sample:
            return torch.argmax(distribution, dim=-1)
        return draw(distribution, generators)

    def warp(self, scores: torch.Tensor) -> torch.Tensor:
        """Temperature, top-k and top-p as transformers' warpers apply them (row by row) before sampling."""
        if self.temperature != 1.0:
            scores = TemperatureLogitsWarper(self.temperature)(None, scores)
        if self.top_k:
            scores = TopKLogitsWarper(top_k=self.top_k)(None, scores)
        if self.top_p < 1.0:
            scores = TopPLogitsWarper(top_p=self.top_p)(None, scores)
        return scores


def draw(probs: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """``torch.multinomial(probs[i:i + 1], 1, generator=generators[i])`` for every row i (rows,), bit for bit, with
    one division and one argmax for all rows.

    For one sample torch draws ``q ~ Exp(1)`` per entry with the row's generator and takes ``argmax(p / q)``
    (ATen's ``multinomial``, its path for one sample); here each row's ``q`` is drawn the same way, so each
    generator moves on exactly as it would. What is left out is multinomial's check of its input, a dozen small
    kernels per row per step on a GPU (at 32 rows, about 400 launches a step): the caller checks the logits once
    for all rows instead (:meth:`BatchDecoder._take`).

    The noise is drawn in place into the rows of one tensor: one operation per row (a separate tensor per row and
    a concatenation of them took three). A contiguous row of ``vocab`` entries draws what a fresh (1, vocab) tensor
    would: the numbers depend on the generator's state and the count, not on where they are written."""
    noise = torch.empty_like(probs)
    for row, generator in zip(noise.unbind(0), generators):
        row.exponential_(1, generator=generator)
    return torch.argmax(probs / noise, dim=-1)


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

    def take(self, code: int, latent: torch.Tensor, stop_code: int) -> None:
        """Append a generated code and its latent; the request is done at the stop code or at its code limit."""
        self.codes.append(code)
        self.latents.append(latent)
        if code == stop_code:
            self.ended_with_stop = True
            self.done = True
        elif len(self.codes) >= self.max_codes:
            self.done = True


def staying(rows: list[DecodeRequest], leaving: list[DecodeRequest]) -> list[int]:
    """Indices of ``rows`` not in ``leaving`` (by identity: requests hold tensors, ``==`` would compare them)."""
    gone = {id(r) for r in leaving}
    return [i for i, r in enumerate(rows) if id(r) not in gone]


def prefix_embeddings(gpt: nn.Module, cond_latents: torch.Tensor, text_tokens: torch.Tensor) -> torch.Tensor:
    """coqui's ``GPT.compute_embeddings`` without storing anything on the model: [cond][start text stop]."""
    text = F.pad(text_tokens, (0, 1), value=gpt.stop_text_token)
    text = F.pad(text, (1, 0), value=gpt.start_text_token)
    emb = gpt.text_embedding(text) + gpt.text_pos_embedding(text)
    return torch.cat([cond_latents.to(emb.dtype), emb], dim=1)


# Most requests prefilled in one forward pass. On a GPU a prefill of one request is mostly kernel launches (30
# layers), which one pass for several shares (not measured yet: no GPU since). On the 2-core CPU, full-size GPT
# (benchmarks/decode_step.py), it is about even: groups of 16 gave 1.02-1.18x over one by one and a group of 32
# 0.94x; groups of 8 gave 1.09x for 8 requests, 1.12x for 16 and 0.99x for 32.
PREFILL_GROUP = 8


def prefill_rows(gpt: nn.Module, prefixes: list[torch.Tensor]) -> list[torch.Tensor]:
    """What each request's prefill runs: its prefix (1, P, dim) and then the start code's embedding."""
    start = torch.full((1, 1), gpt.start_audio_token, dtype=torch.long, device=prefixes[0].device)
    start_emb = gpt.mel_embedding(start) + gpt.mel_pos_embedding(start)
    return [torch.cat([p, start_emb.to(p.dtype)], dim=1) for p in prefixes]


def prefill_forward(transformer: nn.Module, rows: list[torch.Tensor]) -> Prefilled:
    """coqui's first generation step for each of ``rows`` (:func:`prefill_rows`) through Hugging Face's
    ``GPT2Model`` (``transformer``: coqui's ``gpt.gpt``, or the decoder's copy of it) with a fresh cache, for all
    of them in one forward pass: the last position's hidden state of each (n, dim), each layer's keys and values
    (n, heads, longest, head_dim) and each row's length.

    Rows are right-padded: every real position comes before any padding, so plain causal attention (no mask)
    lets a real position see exactly its own row's earlier positions, and a padded one is never left with
    nothing to attend to (no NaN to leak); a row's keys and values are its first ``length`` columns. One
    request alone runs exactly as coqui's ``generate`` runs it (an all-ones mask)."""
    if rows[0].dtype != torch.float32:  # half-precision blocks (decode_transformer): see padded_prefill
        return padded_prefill(transformer, rows)
    device = rows[0].device
    lengths = [row.shape[1] for row in rows]
    if len(rows) == 1:
        emb, mask = rows[0], torch.ones(1, lengths[0], dtype=torch.long, device=device)
    else:
        emb, mask = right_padded(rows), None
    out = transformer(inputs_embeds=emb, past_key_values=DynamicCache(), attention_mask=mask, use_cache=True,
                      return_dict=True)
    layers = out.past_key_values.layers
    return gathered((out.last_hidden_state, [layer.keys for layer in layers], [layer.values for layer in layers]),
                    lengths)


def prefill(gpt: nn.Module, prefixes: list[torch.Tensor]) -> Prefilled:
    """:func:`prefill_forward` of the requests with these prefixes."""
    return prefill_forward(gpt.gpt, prefill_rows(gpt, prefixes))


@dataclass(frozen=True)
class DecoderParts:
    """What a :class:`BatchDecoder` runs besides its GPT's own modules; the default is coqui's way (``gpt.gpt``, eager
    steps, prefills and head, one step at a time). :meth:`xtts_ft.inference.decoder_settings.DecoderSettings.decoder`
    builds it from the settings; a test builds one itself, each graph part with a stand-in recorder (``record=``,
    e.g. ``DecoderParts(step=FixedShapeStep(record=call_directly), max_rows=8)``) to run the graphs' code on a CPU.

    ``transformer``: the GPT-2 blocks to run instead of ``gpt.gpt`` (a copy in another dtype,
    :func:`decode_transformer`); the embeddings, the final norm and the output head stay ``gpt``'s. ``step``: steps
    replayed from CUDA graphs (:mod:`.decode_graph`), over a cache laid out once for ``max_rows`` rows (the most the
    decoder will hold: required with it). ``prefill``: prefills replayed from CUDA graphs (:mod:`.prefill_graph`).
    ``head``: the step's head (final norm to distribution) replayed from CUDA graphs (:mod:`.head_graph`).
    ``overlap``: each step launched before the one before it is read back (:mod:`.step_in_flight`: on a card the
    host's work then runs while the GPU computes), the same codes."""

    transformer: Optional[nn.Module] = None
    step: Optional[FixedShapeStep] = None
    max_rows: Optional[int] = None
    prefill: Optional[FixedShapePrefill] = None
    head: Optional[FixedShapeHead] = None
    overlap: bool = False

    def __post_init__(self) -> None:
        if self.step is not None and not self.max_rows:
            raise ValueError("a decoder with a fixed-shape step needs max_rows (its cache is laid out once)")


class BatchDecoder:
    """The rows being decoded and their joint KV cache (:class:`.decode_cache.SlotCache`). Not thread-safe: one
    thread drives it.

    A step reads the codes back from the device once for all rows (a GPU waits for the host once per step,
    not once per row); the stop and length checks, and the readers' views, are on the host.
    """

    def __init__(self, gpt: nn.Module, parts: DecoderParts = DecoderParts()) -> None:
        """``parts``: what it runs besides ``gpt``'s own modules (:class:`DecoderParts`; the default: coqui's way)."""
        problem = unsupported(gpt)
        if problem:
            raise ValueError(f"the batched decoder cannot run this GPT: {problem}")
        self.gpt = gpt
        self.parts = parts
        self.transformer = gpt.gpt if parts.transformer is None else parts.transformer
        self._dtype = weights_dtype(self.transformer)  # what the blocks are fed
        self.rows: list[DecodeRequest] = []
        self._cache = (SlotCache(self.transformer) if parts.step is None else
                       StaticSlotCache(self.transformer, rows=int(parts.max_rows or 1)))
        self._seen: Optional[torch.Tensor] = None  # (rows, vocab) bool: the ids in each row's generate input
        self._in_flight: Optional[InFlight[DecodeRequest]] = None  # (overlap) the step launched and not read back yet

    def __len__(self) -> int:
        return len(self.rows)

    # --- joining -----------------------------------------------------------------------------
    def join(self, *requests: DecodeRequest) -> None:
        """Prefill ``requests`` (together: :func:`prefill` on groups of at most ``PREFILL_GROUP`` of similar
        length), choose each one's first code and add each to the batch (or finish it)."""
        self.flush()  # a join changes the batch's rows and cache: the step in flight is read back first
        by_length = sorted(requests, key=lambda r: r.prefix.shape[1])  # similar lengths together: little padding
        for first in range(0, len(by_length), PREFILL_GROUP):
            self._join_group(by_length[first:first + PREFILL_GROUP])

    def _join_group(self, requests_: list[DecodeRequest]) -> None:
        gpt = self.gpt
        rows = [row.to(self._dtype) for row in prefill_rows(gpt, [r.prefix for r in requests_])]
        forward = prefill_forward if self.parts.prefill is None else self.parts.prefill.run
        hidden, keys, values, lengths = forward(self.transformer, rows)
        seen = torch.zeros(len(requests_), gpt.mel_head.out_features, dtype=torch.bool, device=hidden.device)
        # coqui's generate input: prefix_len ids 1, then the start code (two fills: a list index is a copy that waits)
        seen[:, 1] = True
        seen[:, int(gpt.start_audio_token)] = True
        self._accept(requests_, seen, hidden)
        staying_rows = [i for i, request in enumerate(requests_) if not request.done]
        for i in staying_rows:
            self._cache.add([k[i:i + 1, :, :lengths[i]] for k in keys], [v[i:i + 1, :, :lengths[i]] for v in values])
            self.rows.append(requests_[i])
        if staying_rows:
            kept = seen.index_select(0, indices(staying_rows, seen.device))
            self._seen = kept if self._seen is None else torch.cat([self._seen, kept])

    def record_prefills(self, longest: int) -> int:
        """Record the fixed-shape prefill of one request for every length bucket up to ``longest`` positions (a
        server's warm-up: a caller alone then never waits for a recording); how many were recorded (0 without
        prefill graphs). The inputs are zeros: a recording's inputs are copied in at every replay."""
        if self.parts.prefill is None:
            return 0
        before = self.parts.prefill.recordings
        bucket = self.parts.prefill.length_bucket
        device = next(self.transformer.parameters()).device
        for length in range(bucket, longest + bucket, bucket):
            row = torch.zeros(1, min(length, longest), self.transformer.config.n_embd, dtype=self._dtype, device=device)
            self.parts.prefill.run(self.transformer, [row])
        return self.parts.prefill.recordings - before

    # --- stepping ----------------------------------------------------------------------------
    def step(self) -> None:
        """One code for every row; rows that finish leave the batch. With ``parts.overlap`` the code each row gets
        here is the one of the step launched before, and the next step is launched before it is read."""
        if not self.rows:
            self.flush()
            return
        if not self.parts.overlap:
            self._take(self._launch([r.codes[-1] for r in self.rows], [len(r.codes) for r in self.rows]))
        else:
            before = self._in_flight
            if before is None:  # the first step after a join: its input from the host
                before = self._launch([r.codes[-1] for r in self.rows], [len(r.codes) for r in self.rows])
            # the next step, from the codes still on the device, at the position after them
            self._in_flight = self._launch(before.next_input(), [len(r.codes) + 1 for r in self.rows])
            self._take(before)
        self.drop([r for r in self.rows if r.done])

    def flush(self) -> None:
        """Read back the step in flight (``overlap``), if any; rows that finish with it leave the batch."""
        before, self._in_flight = self._in_flight, None
        if before is not None and before.rows:
            self._take(before)
            self.drop([r for r in self.rows if r.done])

    def _launch(self, last: list[int] | torch.Tensor, positions: list[int]) -> InFlight[DecodeRequest]:
        """One step for the batch's rows from each row's last code (a list on the host, or the step before's codes
        still on the device) at its position: the codes chosen, on the device, their copy to the host started."""
        gpt = self.gpt
        assert self._seen is not None
        device = self._seen.device
        if isinstance(last, torch.Tensor):
            position = host_to_device(torch.tensor(positions, dtype=torch.long), device)
        else:  # each row's last code and its position, in one transfer that does not wait for the stream
            last, position = host_to_device(torch.tensor([last, positions], dtype=torch.long), device)
        emb = (gpt.mel_embedding(last) + gpt.mel_pos_embedding.emb(position)).unsqueeze(1).to(self._dtype)
        hidden = self._cache.step(emb, self.parts.step)
        return self._choose_launched(self.rows, self._seen, hidden)

    def _accept(self, requests: list[DecodeRequest], seen: torch.Tensor, hidden: torch.Tensor) -> None:
        """Choose each request's next code from its hidden state (rows, dim); mark it seen; finish the ones that end."""
        self._take(self._choose_launched(requests, seen, hidden))

    def _choose_launched(self, requests: list[DecodeRequest], seen: torch.Tensor,
                         hidden: torch.Tensor) -> InFlight[DecodeRequest]:
        latents, codes, finite = self._choose(requests, seen, hidden)
        seen[torch.arange(len(requests), device=seen.device), codes] = True
        # a row whose logits are not all finite (a broken model, half precision overflowing) has no code to give:
        # marked -1 and refused at the step's one read from the device (:meth:`_take`), instead of a check per row
        return InFlight.launched(requests, codes, finite, latents)

    def _take(self, step: InFlight[DecodeRequest]) -> None:
        """Hand each row its code and latent from ``step`` (the step's one wait for the device); finish the ones that
        end."""
        chosen, latents = step.read()
        if min(chosen) < 0:
            raise RuntimeError(f"the GPT's logits are not finite (NaN or inf) for {sum(c < 0 for c in chosen)} of "
                               f"{len(chosen)} requests; no code can be chosen")
        stop = int(self.gpt.stop_audio_token)
        for request, code, latent in zip(step.rows, chosen, latents):
            request.take(code, latent, stop)

    def _choose(self, requests: list[DecodeRequest], seen: torch.Tensor,
                hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Each row's latent (rows, dim), chosen code (rows,) and whether its logits were all finite (rows,)."""
        groups: dict[Sampling, list[int]] = {}
        for i, request in enumerate(requests):
            groups.setdefault(request.sampling, []).append(i)
        generators = [r.generator for r in requests]
        if len(groups) == 1 and self.parts.head is not None:  # on a card: the head replayed from a graph
            sampling = requests[0].sampling
            latents, distribution, finite = self.parts.head.run(self.gpt, hidden, seen, sampling)
            return latents, sampling.pick(distribution, generators), finite
        latents, logits = latents_and_logits(self.gpt, hidden)
        finite = torch.isfinite(logits).all(dim=-1)
        if len(groups) == 1:  # the usual case (one server, one setting): no rows to gather and scatter back
            return latents, requests[0].sampling.choose(logits, seen, generators), finite
        codes = torch.empty(len(requests), dtype=torch.long, device=logits.device)
        for sampling, rows in groups.items():  # rows that share settings together (each warper works row by row)
            index = indices(rows, logits.device)
            codes[index] = sampling.choose(logits.index_select(0, index), seen.index_select(0, index),
                                           [generators[i] for i in rows])
        return latents, codes, finite

    # --- leaving -----------------------------------------------------------------------------
    def drop(self, requests: list[DecodeRequest]) -> None:
        """Remove ``requests`` (finished or cancelled) from the batch; its cache shrinks to what the others use."""
        if not requests:
            return
        keep = staying(self.rows, requests)
        self.rows = [self.rows[i] for i in keep]
        if self._in_flight is not None:  # (overlap) its codes for the rows that leave are never read
            self._in_flight = self._in_flight.kept(keep) if keep else None
        self._cache.keep(keep)
        if not keep:
            self._seen = None
        elif self._seen is not None:
            self._seen = self._seen.index_select(0, indices(keep, self._seen.device))


def weights_dtype(module: nn.Module) -> torch.dtype:
    """The dtype of ``module``'s weights (fp32 for one without any)."""
    return next((p.dtype for p in module.parameters()), torch.float32)


def decode_transformer(gpt: nn.Module, dtype: Optional[torch.dtype]) -> nn.Module:
    """The GPT-2 blocks a decoder runs in ``dtype``: ``gpt.gpt`` itself (None, or its own dtype), else a copy with its
    weights cast once (the model's own stay as they are: evaluation shares it with training). Autocast instead
    casts every weight at every step: on an H200 its bf16 steps were 3-4x slower than fp32 without CUDA graphs."""
    transformer = gpt.gpt
    if dtype is None or weights_dtype(transformer) == dtype:
        return transformer
    copy_ = copy.deepcopy(transformer).to(dtype)
    copy_.requires_grad_(False)
    return copy_.eval()


def decode_all(gpt: nn.Module, requests: list[DecodeRequest], max_batch: Optional[int] = None,
               decoder: Optional[BatchDecoder] = None) -> None:
    """Decode ``requests`` to the end in batches of at most ``max_batch`` rows (new ones join as others finish);
    ``decoder``: the one to run (:meth:`xtts_ft.inference.decoder_settings.DecoderSettings.decoder`), empty;
    None: an eager fp32 one."""
    decoder = BatchDecoder(gpt) if decoder is None else decoder
    waiting = list(requests)
    while waiting or decoder.rows:
        room = len(waiting) if max_batch is None else max(0, max_batch - len(decoder))
        if room and waiting:
            joining, waiting = waiting[:room], waiting[room:]
            decoder.join(*joining)  # prefilled together
        decoder.step()

"""HiFiGAN over a growing sequence of GPT latents, each stretch of audio vocoded once.

coqui's ``inference_stream`` re-runs the vocoder over *all* latents so far at every chunk (work
quadratic in the length: about 15x the needed work on a 28 s sentence). Here each chunk vocodes only
its new frames plus a fixed left context and right look-ahead, so the work is linear in the audio:

- ``HifiDecoder.forward`` first upsamples the latents linearly twice (x4 to the mel frame rate, then
  x24000/22050 to the output rate). The second factor is not an integer, so a window of latents does
  not map onto whole frames of the full utterance. :meth:`StreamingVocoder._frames` therefore computes
  the upsampled frames by index, exactly as ``torch.nn.functional.interpolate`` (linear,
  ``align_corners=False``) places them for the whole utterance, and only the frames whose inputs are
  all known already (not the clamped right edge) count as ready;
- the waveform generator runs on ``[first new frame - CONTEXT_FRAMES, last ready frame)``; the audio
  of the last ``LOOKAHEAD_FRAMES`` is not kept (it saw the zero padding at the window's right edge,
  not the frames that will follow) and is vocoded again by the next chunk;
- the ``CROSSFADE_FRAMES`` before that point are held back and cross-faded (linear) with the next
  chunk's version of the same samples, so a join is a blend of two near-identical signals.

The sizes follow from the generator's receptive field (below); tests/inference/test_streaming_vocoder.py
checks the streamed audio against the whole-utterance vocoding away from the joins, the sample-to-sample
jumps at the joins, and the linear work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as F
from torch.nn.utils import parametrize

from xtts_ft.inference.decode_cache import host_to_device

# XTTS's HiFiGAN generator (conv_pre, upsampling 8-8-2-2, resblocks of kernels 3/7/11 with dilations 1/3/5) sees
# about 13 frames to the left and 14 to the right of each output frame (measured: one input frame changed, the
# samples that change at all). 16 frames on each side cover all of it, so a chunk's kept audio is the same
# computation as the whole utterance's, up to float rounding, whatever the weights.
CONTEXT_FRAMES = 16  # left context given to the waveform generator (frames of output_hop_length samples)
LOOKAHEAD_FRAMES = 16  # right edge of each window, vocoded again by the next chunk
CROSSFADE_FRAMES = 2  # samples blended at each join, in frames (2 x 256 samples ~ 21 ms at 24 kHz)


class StreamingVocoder:
    """Feed latents with :meth:`add`; :meth:`audio` returns the samples ready so far (``final=True``: all)."""

    def __init__(self, hifigan: torch.nn.Module, speaker_embedding: torch.Tensor, *, context_frames: int = CONTEXT_FRAMES,
                 lookahead_frames: int = LOOKAHEAD_FRAMES, crossfade_frames: int = CROSSFADE_FRAMES) -> None:
        self.hifigan = hifigan
        self.g = speaker_embedding
        self.hop = int(hifigan.output_hop_length)
        self.r1 = hifigan.ar_mel_length_compression / hifigan.output_hop_length
        self.r2 = (hifigan.output_sample_rate / hifigan.input_sample_rate
                   if hifigan.output_sample_rate != hifigan.input_sample_rate else 1.0)
        self.context = context_frames
        self.lookahead = lookahead_frames
        self.crossfade = crossfade_frames * self.hop
        self._latents: list[torch.Tensor] = []
        self._emitted = 0  # samples handed out (or held in the tail) so far; always a whole number of frames
        self._tail: Optional[torch.Tensor] = None  # the held-back samples to blend into the next chunk
        self.frames_vocoded = 0  # work done: frames passed through the waveform generator
        self.windows = 0

    def add(self, latents: list[torch.Tensor]) -> None:
        """Append latents (each (D,), one per code)."""
        self._latents.extend(latents)

    # --- frames ------------------------------------------------------------------------------
    def _sizes(self, final: bool) -> tuple[int, int]:
        """(upsampled frames that exist, of them the ones final already)."""
        n = len(self._latents)
        n1 = int(math.floor(n * self.r1))
        n2 = int(math.floor(n1 * self.r2))
        if final:
            return n2, n2
        ready1 = _ready(n1, n, self.r1)
        return n2, _ready(n2, ready1, self.r2)

    def _frames(self, start: int, stop: int, total: int) -> torch.Tensor:
        """Upsampled frames ``[start, stop)`` (C, stop-start) of the utterance whose final frame count is ``total``.

        The index tables are worked out on the host (NumPy, in float64 as interpolate places its sources) and only
        the latents the window reads are stacked: a chunk's cost does not grow with the utterance, and nothing here
        waits for the GPU (the tables go over from pinned memory). The first version stacked every latent at every
        chunk and called ``torch.unique`` on the device (:mod:`.streaming_vocoder_reference`, the tests' oracle:
        the same frames, bit for bit)."""
        n = len(self._latents)
        j0, j1, w2 = _source(np.arange(start, stop, dtype=np.float64), self.r2, int(math.floor(n * self.r1)))
        # j0 and j1 never fall and rise by at most one from frame to frame, so [j0[0], j1[-1]] holds every
        # intermediate (x4) frame the window reads, and [a0[0], a1[-1]] every latent those read
        lo = int(j0[0])
        a0, a1, w1 = _source(np.arange(lo, int(j1[-1]) + 1, dtype=np.float64), self.r1, n)
        first = int(a0[0])
        latents = torch.stack(self._latents[first:int(a1[-1]) + 1])  # (window's latents, C)
        device, mid, out = latents.device, len(a0), stop - start
        index = host_to_device(torch.from_numpy(np.concatenate([a0 - first, a1 - first, j0 - lo, j1 - lo])), device)
        weights = host_to_device(torch.from_numpy(np.concatenate([w1, w2])), device).to(latents.dtype)[:, None]
        i0, i1, k0, k1 = index.split([mid, mid, out, out])
        v1, v2 = weights.split([mid, out])
        return _lerp(_lerp(latents, i0, i1, v1), k0, k1, v2).T

    # --- audio -------------------------------------------------------------------------------
    def audio(self, final: bool = False) -> npt.NDArray[np.float32]:
        """The float32 samples that are ready (may be empty); ``final``: the utterance is complete, give the rest."""
        plan = self.plan(final)
        if isinstance(plan, np.ndarray):
            return plan
        return self.finish(plan, vocode_windows(self.hifigan, [plan])[0])

    def plan(self, final: bool = False) -> npt.NDArray[np.float32] | Window:
        """What :meth:`audio` does up to the waveform generator: the :class:`Window` to vocode, or the samples
        themselves when there is nothing to vocode (none ready yet, or only the held tail)."""
        total, ready = self._sizes(final)
        good_end = ready if final else ready - self.lookahead  # frames whose audio is kept this time
        if not final and good_end * self.hop - self.crossfade <= self._emitted:
            return np.zeros(0, dtype=np.float32)
        start = self._emitted // self.hop
        if good_end <= start:  # final, and nothing new (an utterance shorter than the held tail)
            out = self._tail if self._tail is not None else torch.zeros(0)
            self._tail = None
            return out.detach().cpu().numpy().astype(np.float32, copy=False)
        w0 = max(0, start - self.context)
        return Window(self._frames(w0, ready, total), self.g, final, keep_from=(start - w0) * self.hop,
                      keep_to=(good_end - w0) * self.hop)

    def finish(self, window: Window, wav: torch.Tensor) -> npt.NDArray[np.float32]:
        """The samples of ``window`` (planned by :meth:`plan`, nothing planned since) from its audio ``wav``."""
        self.frames_vocoded += window.frames.shape[-1]
        self.windows += 1
        seg = wav[window.keep_from:window.keep_to].clone()
        if self._tail is not None:
            n = min(len(self._tail), len(seg))
            fade = torch.linspace(0.0, 1.0, n + 2, dtype=seg.dtype, device=seg.device)[1:-1]
            seg[:n] = self._tail[:n] * (1 - fade) + seg[:n] * fade
        if window.final:
            self._tail = None
            self._emitted += len(seg)
            out = seg
        else:
            keep = len(seg) - self.crossfade
            out, self._tail = seg[:keep], seg[keep:]
            self._emitted += keep
        return out.detach().cpu().numpy().astype(np.float32, copy=False)


@dataclass(frozen=True)
class Window:
    """One call's input to the waveform generator: upsampled frames (C, T) and the speaker embedding; the samples
    of its audio that are kept ``[keep_from, keep_to)``; ``final``: its right edge is the utterance's end."""

    frames: torch.Tensor
    g: torch.Tensor
    final: bool
    keep_from: int
    keep_to: int


def windows_fit(a: Window, b: Window) -> bool:
    """Whether ``b`` can share ``a``'s vocoder call. Windows are right-padded with zero frames to the longest;
    the padding reaches only the audio within the generator's right reach of a window's edge, which a window
    that is not final does not keep (``LOOKAHEAD_FRAMES`` >= the 14 frames the generator sees to the right).
    A final window keeps its audio to the edge: it shares only with windows of its own length."""
    stackable = a.frames.shape[0] == b.frames.shape[0] and a.frames.dtype == b.frames.dtype and \
        a.frames.device == b.frames.device and a.g.shape == b.g.shape
    return stackable and (a.frames.shape == b.frames.shape or not (a.final or b.final))


def vocode_windows(hifigan: torch.nn.Module, windows: list[Window]) -> list[torch.Tensor]:
    """Each window's audio (fp32, one dimension), from one call of the waveform generator for all of them."""
    if len(windows) == 1:  # exactly the call one stream makes alone
        w = windows[0]
        return [hifigan.waveform_decoder(w.frames[None], g=w.g).reshape(-1).float()]  # fp32 under autocast too
    longest = max(w.frames.shape[-1] for w in windows)
    frames = torch.stack([F.pad(w.frames, (0, longest - w.frames.shape[-1])) for w in windows])
    g = torch.cat([w.g for w in windows])
    wav = hifigan.waveform_decoder(frames, g=g).reshape(len(windows), -1).float()
    return [wav[i] for i in range(len(windows))]


def fold_weight_norm(hifigan: torch.nn.Module) -> int:
    """Make each weight-normed convolution of HiFiGAN's waveform generator a plain one holding the weight it computes
    (``remove_parametrizations(..., leave_parametrized=True)``: the same numbers, bit for bit); how many were folded
    (0 the second time). For serving only: the engine's model never trains, and otherwise every vocoder call
    computes 76 weights again from ``g`` and ``v`` (a first chunk's 44-frame window on two CPU cores: 129.0 against
    141.1 ms, ``python benchmarks/vocoder_windows.py --batches 1 --frames 44 --repeats 5``; on a GPU, about three
    small kernels each). coqui's own
    ``HifiganGenerator.remove_weight_norm`` stops with an error on XTTS's generator, whose ``conv_pre`` has no weight
    norm."""
    folded = 0
    for module in hifigan.waveform_decoder.modules():
        if parametrize.is_parametrized(module, "weight"):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
            folded += 1
    return folded


def _source(dst: npt.NDArray[np.float64], scale: float,
            size: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Where ``interpolate(mode="linear", align_corners=False, scale_factor=scale)`` reads output index ``dst``: the
    two source indices and the second one's weight (float64, the arithmetic of torch's index computation)."""
    src = np.maximum((dst + 0.5) / scale - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), size - 1)
    i1 = np.where(i0 < size - 1, i0 + 1, i0)
    return i0, i1, src - i0


def _lerp(rows: torch.Tensor, i0: torch.Tensor, i1: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``rows[i0] + (rows[i1] - rows[i0]) * weight``, the first version's arithmetic bit for bit, in two new tensors
    instead of four."""
    low = rows[i0]
    return rows[i1].sub_(low).mul_(weight).add_(low)


def _ready(n_out: int, n_in_known: int, scale: float) -> int:
    """Output frames (of ``n_out``) whose both sources lie below ``n_in_known`` - 1: not the clamped right edge."""
    if n_in_known < 2:
        return 0
    # src(k) = (k + 0.5) / scale - 0.5 must satisfy floor(src) + 1 <= n_in_known - 1
    k = int(math.floor((n_in_known - 1 + 0.5) * scale - 0.5))  # largest k with src(k) < n_in_known - 1
    while k >= 0 and math.floor((k + 0.5) / scale - 0.5) + 1 > n_in_known - 1:
        k -= 1
    return max(0, min(n_out, k + 1))

"""One streaming pass over the recordings: the recogniser's CTC log-probabilities and silero-vad's
speech probabilities, both on one timeline of all files in reading order.

The recogniser sees the audio in chunks of ``CHUNK_S`` seconds plus ``CONTEXT_S`` on each side
(the context frames are computed and thrown away), so no chunk edge falls inside what a frame
hears and memory stays bounded. Log-probabilities are kept as float16: one hour at 40 ms per
frame and ~220 letters is about 40 MB. silero-vad resets its state on every call, so each call
gets the last second of the previous audio again and its probabilities are dropped.
Frames never span two files: a file's frames start where the previous file's end.
Homophone letters the recogniser can output separately (ሠ and ሰ, ...) have their probabilities added
into the folded letter, because the text is spelt folded (:mod:`.text_units`): a recogniser trained on
unfolded text then still backs the letter the text asks for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Union

import numpy as np
import numpy.typing as npt
import torch

from xtts_ft.ingest.source_audio import RATE, SourceFile, read_blocks
from xtts_ft.quality.voice_activity import WINDOW as VAD_WINDOW
from xtts_ft.text import fold_homophones

if TYPE_CHECKING:
    from xtts_ft.asr.recognizer import Recognizer

CHUNK_S = 30.0
CONTEXT_S = 2.0
VAD_CONTEXT = 32 * VAD_WINDOW  # about one second re-read before each call

# (frames, vocab) CTC log-probabilities: float16 from the pass over long recordings, float32 for one clip
# (short_pieces.WordAligner); alignment reads either.
LogProbs = Union[npt.NDArray[np.float16], npt.NDArray[np.float32]]


@dataclass
class Analysis:
    """What the pass measured. Frame ``f`` of file ``i`` is global frame ``file_frames[i] + f``."""

    frame_s: float  # seconds per recogniser frame
    log_probs: LogProbs  # all files end to end
    file_frames: list[int]  # first global frame of each file
    sources: list[SourceFile]
    vad_probs: list[npt.NDArray[np.float32]] = field(default_factory=list)  # per file, one per 32 ms window
    blocks_read: int = 0

    def file_of(self, frame: int) -> int:
        i = int(np.searchsorted(self.file_frames, frame, side="right")) - 1
        return max(0, min(i, len(self.sources) - 1))

    def time_of(self, frame: float) -> float:
        """Timeline seconds of a (possibly fractional) global frame."""
        i = self.file_of(int(frame))
        return self.sources[i].offset_s + (frame - self.file_frames[i]) * self.frame_s

    def frame_of(self, seconds: float) -> int:
        i = max(0, int(np.searchsorted([s.offset_s for s in self.sources], seconds, side="right")) - 1)
        local = int(round((seconds - self.sources[i].offset_s) / self.frame_s))
        return self.file_frames[i] + max(0, local)

    def end_frame(self, file_index: int) -> int:
        nxt = file_index + 1
        return self.file_frames[nxt] if nxt < len(self.file_frames) else len(self.log_probs)


def homophone_columns(vocab: Mapping[str, int]) -> list[tuple[int, int]]:
    """(unfolded id, folded id) for each vocabulary letter that folds to another letter in the vocabulary."""
    return [(i, vocab[fold_homophones(t)]) for t, i in vocab.items()
            if len(t) == 1 and fold_homophones(t) != t and fold_homophones(t) in vocab]


def fold_columns(log_probs: npt.NDArray[np.float32], pairs: list[tuple[int, int]]) -> npt.NDArray[np.float32]:
    """Add each unfolded letter's probability into its folded letter's (in place; the unfolded one -> -inf)."""
    for src, dst in pairs:
        log_probs[:, dst] = np.logaddexp(log_probs[:, dst], log_probs[:, src])
        log_probs[:, src] = -np.inf
    return log_probs


class _EmissionStream:
    """Chunked CTC log-probabilities of one file from its 16 kHz blocks."""

    def __init__(self, recognizer: Recognizer, samples_per_frame: int) -> None:
        self.rec = recognizer
        self.fold = homophone_columns(recognizer.processor.tokenizer.get_vocab())
        self.spf = samples_per_frame
        self.core = int(CHUNK_S * RATE) // self.spf * self.spf
        self.ctx = int(CONTEXT_S * RATE) // self.spf * self.spf
        self.buf: npt.NDArray[np.float32] = np.zeros(0, np.float32)
        self.buf_start = 0  # sample index (in the file) of buf[0]
        self.next_core = 0
        self.frames: list[npt.NDArray[np.float16]] = []

    def feed(self, block: npt.NDArray[np.float32]) -> None:
        self.buf = np.concatenate([self.buf, block])
        while self.buf_start + len(self.buf) >= self.next_core + self.core + self.ctx:
            self._emit(self.next_core + self.core)

    def finish(self) -> npt.NDArray[np.float16]:
        total = self.buf_start + len(self.buf)
        while self.next_core < total:
            self._emit(min(total, self.next_core + self.core))
        return np.concatenate(self.frames) if self.frames else np.zeros((0, 1), np.float16)

    def _emit(self, core_end: int) -> None:
        c0, total = self.next_core, self.buf_start + len(self.buf)
        w0, w1 = max(0, c0 - self.ctx), min(total, core_end + self.ctx)
        window = self.buf[w0 - self.buf_start: w1 - self.buf_start]
        log_probs = fold_columns(log_probs_of(self.rec, window), self.fold)
        skip = (c0 - w0) // self.spf
        wanted = math.ceil((core_end - c0) / self.spf)
        got = log_probs[skip: skip + wanted]
        if len(got) < wanted:  # the model's last frame covers a partial hop: repeat it
            pad = np.repeat(log_probs[-1:], wanted - len(got), axis=0)
            got = np.concatenate([got, pad])
        self.frames.append(got.astype(np.float16))
        self.next_core = core_end
        keep_from = max(0, core_end - self.ctx)
        self.buf = self.buf[keep_from - self.buf_start:]
        self.buf_start = keep_from


class _VadStream:
    """silero-vad speech probability per 32 ms window of one file."""

    def __init__(self, model: torch.jit.ScriptModule) -> None:
        self.model = model
        self.buf: npt.NDArray[np.float32] = np.zeros(0, np.float32)
        self.buf_start = 0
        self.pos = 0  # samples already turned into windows
        self.probs: list[npt.NDArray[np.float32]] = []

    def feed(self, block: npt.NDArray[np.float32], last: bool = False) -> None:
        self.buf = np.concatenate([self.buf, block])
        end = self.buf_start + len(self.buf)
        n_new = (end - self.pos) // VAD_WINDOW
        if last and (end - self.pos) % VAD_WINDOW:
            n_new += 1  # silero pads the final partial window with zeros
        if n_new <= 0:
            return
        x = self.buf[: self.pos - self.buf_start + n_new * VAD_WINDOW]
        probs = self.model.audio_forward(torch.from_numpy(np.ascontiguousarray(x))[None], RATE)[0].numpy()
        self.probs.append(probs[-n_new:].astype(np.float32))
        self.pos += n_new * VAD_WINDOW
        keep_from = max(0, self.pos - VAD_CONTEXT)
        self.buf = self.buf[keep_from - self.buf_start:]
        self.buf_start = keep_from

    def finish(self) -> npt.NDArray[np.float32]:
        self.feed(np.zeros(0, np.float32), last=True)
        return np.concatenate(self.probs) if self.probs else np.zeros(0, np.float32)


def log_probs_of(recognizer: Recognizer, audio: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """(frames, vocab) float32 CTC log-probabilities of one 16 kHz clip."""
    inputs = recognizer.processor.feature_extractor(
        [audio], sampling_rate=RATE, return_attention_mask=True, return_tensors="pt"
    )
    inputs = {k: v.to(recognizer.device) for k, v in inputs.items()}
    with torch.inference_mode():
        logits = recognizer.model(**inputs).logits[0]
    log_probs: npt.NDArray[np.float32] = torch.log_softmax(logits.float(), dim=-1).cpu().numpy()
    return log_probs


def samples_per_frame(recognizer: Recognizer) -> int:
    """Input samples per output frame, measured on 30 s of silence and snapped to the 10 ms hop."""
    n = len(log_probs_of(recognizer, np.zeros(int(CHUNK_S * RATE), np.float32)))
    hop = RATE // 100
    return max(hop, int(round(CHUNK_S * RATE / n / hop)) * hop)


def analyse(sources: Sequence[SourceFile], recognizer: Recognizer, block_s: float,
            vad_model: Optional[torch.jit.ScriptModule] = None,
            progress: Optional[Callable[[float], object]] = None) -> Analysis:
    """Log-probabilities (and VAD probabilities when ``vad_model`` is given) of every file, block by block."""
    spf = samples_per_frame(recognizer)
    arrays: list[npt.NDArray[np.float16]] = []
    starts: list[int] = []
    vads: list[npt.NDArray[np.float32]] = []
    blocks = 0
    total = 0
    for source in sources:
        emissions = _EmissionStream(recognizer, spf)
        vad = _VadStream(vad_model) if vad_model is not None else None
        for block in read_blocks(source, block_s):
            blocks += 1
            emissions.feed(block)
            if vad is not None:
                vad.feed(block)
            if progress is not None:
                progress(len(block) / RATE)
        frames = emissions.finish()
        starts.append(total)
        total += len(frames)
        arrays.append(frames)
        if vad is not None:
            vads.append(vad.finish())
    return Analysis(spf / RATE, np.concatenate(arrays), starts, list(sources), vads, blocks)

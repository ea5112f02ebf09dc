"""Short pieces of the user's own training clips: one to a few whole words, cut in the pauses around them.

The maker prepare calls for ``dataset.short_clips`` (see :mod:`xtts_ft.data.derived` for the setting, the
files and the report). For each training clip, in the order of a hash of its id:

1. its normalised text is aligned to its prepared audio with the recogniser, exactly as ingest aligns a
   sentence (:func:`xtts_ft.ingest.align.align_units`, CTC forced alignment): each word of the text gets the
   frames of its letters. A clip whose alignment scores under ``ingest.min_score`` (the text and the audio
   do not agree, or the recogniser is unsure) gives no pieces: ``uncertain_alignment``;
2. a cut point is placed in each pause between two words: the quietest 20 ms of the stretch between the
   last letter of one word and the first letter of the next (at least MIN_GAP_S long); no pause, no cut;
3. candidates are runs of one to MAX_WORDS whole words between two cut points (the clip's own start and end
   count) whose text is short (``xtts_ft.config.is_short_text``), pieces ending where the sentence ends first,
   longer runs first; each is cut with ingest's padding rule (at most ``ingest.max_pad_s`` of the pause kept
   beyond its words);
4. each candidate goes through prepare's audio stage with the dataset's settings and the cut-ending check on
   (:func:`xtts_ft.data.audio.process_audio`: the same checks, trimming and loudness as every clip), then the
   recogniser hears it: kept only when its CER against the piece's text is at most
   ``dataset.short_clips_max_cer`` (or ``dataset.transcript_check`` when that is stricter).

A candidate that fails is counted under its reason (``cut_ending``, ``too_short``, ``transcript_mismatch``,
...) and the clip's next candidate is tried (at most TRIES_PER_CLIP per round); a clip gives at most
PER_CLIP pieces, never two that share a word. Deterministic: no randomness, a fixed order.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import numpy as np
import numpy.typing as npt
import soundfile as sf

from xtts_ft.audio_io import load_audio, resample
from xtts_ft.config import DatasetConfig, IngestConfig, is_short_text
from xtts_ft.data.audio import AudioJob, AudioSettings, process_audio
from xtts_ft.data.derived import DerivedPiece, PieceOutcome, PiecesUnavailable, SourceClip
from xtts_ft.data.levels import EndingRule
from xtts_ft.data.report import pieces_made
from xtts_ft.data.split import hash_fraction
from xtts_ft.errors import ModelError
from xtts_ft.ingest.align import align_units
from xtts_ft.ingest.analysis import Analysis, fold_columns, homophone_columns, log_probs_of, samples_per_frame
from xtts_ft.ingest.source_audio import RATE
from xtts_ft.ingest.text_units import TextUnit
from xtts_ft.stop_signals import raise_if_stopped
from xtts_ft.tempfiles import atomic_write
from xtts_ft.text.error_rates import error_rates, scoring_text

if TYPE_CHECKING:
    from xtts_ft.asr.recognizer import Recognizer

log = logging.getLogger(__name__)

MAX_WORDS = 3  # most words in one piece
PER_CLIP = 2  # most pieces taken from one clip
TRIES_PER_CLIP = 4  # candidates of one clip tried per round before the next clip's turn
MIN_GAP_S = 0.04  # shortest stretch between two words' letters that may hold a cut (one recogniser frame)
QUIET_WINDOW_S = 0.02
STAGE = "prepare (making short clips)"  # what a stop while pieces are made says it interrupted
REASON_UNCERTAIN = "uncertain_alignment"
REASON_MISMATCH = "transcript_mismatch"


@dataclass
class Candidate:
    first: int  # word index, 0-based
    stop: int  # one past the last word
    start_s: float
    end_s: float
    text: str


class ShortPieceMaker:
    """Makes pieces for :func:`xtts_ft.data.derived.add_pieces`; the recogniser is loaded on first use."""

    def __init__(self, ingest: IngestConfig, load_recognizer: Callable[[], Recognizer],
                 not_for_auto: Optional[str] = None) -> None:
        """``not_for_auto``: why ``dataset.short_clips: auto`` makes nothing here (a run that otherwise never
        loads asr.model does not download it for auto); None: auto loads the recogniser when pieces are wanted."""
        self.ingest = ingest
        self._load = load_recognizer
        self._not_for_auto = not_for_auto
        self._recognizer: Optional[Recognizer] = None
        self._aligner: Optional[WordAligner] = None  # both set by _ready, which make() calls first

    def _ready(self, auto: bool) -> None:
        if self._recognizer is not None:
            return
        if auto and self._not_for_auto:
            raise PiecesUnavailable(self._not_for_auto)
        try:
            self._recognizer = self._load()
        except ModelError as exc:
            if not auto:  # a share was asked for: the run cannot do what its config says
                raise
            log.warning("short clips: none made, the recogniser could not be loaded: %s", exc)
            raise PiecesUnavailable(f"the recogniser could not be loaded ({exc})") from None
        self._aligner = WordAligner(self._recognizer, self.ingest.window_s)

    def make(self, cfg: DatasetConfig, sources: list[SourceClip], wanted: int, folder: Path) -> PieceOutcome:
        """Up to ``wanted`` pieces of ``sources`` written into ``folder`` (file names as the pieces say)."""
        self._ready(cfg.short_clips == "auto")
        settings = dataclasses.replace(AudioSettings.from_config(cfg), cut_ending=EndingRule.from_config(cfg))  # always on
        max_cer = cfg.short_clips_max_cer
        if cfg.transcript_check is not None:
            max_cer = min(max_cer, cfg.transcript_check)
        out = PieceOutcome()
        order = sorted(sources, key=lambda s: (hash_fraction(s.clip_id), s.clip_id))
        candidates: dict[str, list[Candidate]] = {}
        raw = folder.parent / (folder.name + ".raw")  # the cuts before the audio stage, removed at the end
        raw.mkdir(parents=True, exist_ok=True)
        try:
            for _ in range(PER_CLIP):
                for src in order:
                    if len(out.pieces) >= wanted:
                        return out
                    raise_if_stopped(STAGE)
                    if src.clip_id not in candidates:
                        out.clips_tried += 1
                        candidates[src.clip_id] = self._candidates(src, out)
                    self._take_one(src, candidates[src.clip_id], settings, max_cer, (raw, folder), out)
        finally:
            shutil.rmtree(raw, ignore_errors=True)
            log.info("short clips: %s", pieces_made(len(out.pieces), wanted, len({p.source for p in out.pieces}),
                                                   out.clips_tried))
        return out

    def _candidates(self, src: SourceClip, out: PieceOutcome) -> list[Candidate]:
        y, rate = load_audio(src.wav)
        words = src.text.split()
        assert self._aligner is not None
        found = self._aligner.word_spans(y, rate, words, self.ingest.min_score)
        if found is None:
            out.dropped[REASON_UNCERTAIN] += 1
            return []
        return candidates_of(words, found, y, rate, self.ingest.max_pad_s)

    def _take_one(self, src: SourceClip, cands: list[Candidate], settings: AudioSettings, max_cer: float,
                  folders: tuple[Path, Path], out: PieceOutcome) -> None:
        mine = [p for p in out.pieces if p.source == src.clip_id]
        tried = 0
        while cands and tried < TRIES_PER_CLIP:
            c = cands.pop(0)
            if any(c.first < p.first_word + p.words and p.first_word < c.stop for p in mine):
                continue  # shares a word with a piece already taken
            tried += 1
            piece = self._try(src, c, settings, max_cer, folders, out)
            if piece is not None:
                out.pieces.append(piece)
                return

    def _try(self, src: SourceClip, c: Candidate, settings: AudioSettings, max_cer: float,
             folders: tuple[Path, Path], out: PieceOutcome) -> Optional[DerivedPiece]:
        name = piece_name(src.wav, c.first, c.stop)
        raw, folder = folders[0] / name, folders[1]
        y, rate = load_audio(src.wav)
        part = cut(y, rate, c.start_s, c.end_s)
        atomic_write(raw, lambda f: sf.write(f, part, rate, subtype="FLOAT", format="WAV"))
        try:
            result = process_audio(AudioJob(f"{src.clip_id}#{name}", str(raw), str(folder / name), settings))
        finally:
            raw.unlink(missing_ok=True)
        if result.reason is not None:
            out.dropped[result.reason] += 1
            return None
        assert self._recognizer is not None
        heard = self._recognizer.transcribe_files([folder / name])[0]
        cer = error_rates(c.text, heard).cer
        if cer > max_cer:
            out.dropped[REASON_MISMATCH] += 1
            (folder / name).unlink(missing_ok=True)
            return None
        return DerivedPiece(name, c.text, src.speaker, src.clip_id, c.first, c.stop - c.first, round(c.start_s, 3),
                            round(c.end_s, 3), round(result.duration_s, 3), round(cer, 4), heard)


def piece_name(source_wav: Path, first: int, stop: int) -> str:
    """``<source>__wA-B.wav``: words A..B (1-based) of the source clip."""
    return f"{Path(source_wav).stem}__w{first + 1:02d}-{stop:02d}.wav"


def cut(y: npt.NDArray[np.float32], rate: int, start_s: float, end_s: float) -> npt.NDArray[np.float32]:
    """The samples of ``y`` from start_s to end_s (what a piece is before the audio stage)."""
    return y[int(round(start_s * rate)): int(round(end_s * rate))]


def quietest_point(y: npt.NDArray[np.float32], rate: int, t0: float, t1: float) -> float:
    """The middle of the quietest QUIET_WINDOW_S of ``y`` between t0 and t1 (seconds); t0..t1 shorter: the middle."""
    win = max(1, int(round(QUIET_WINDOW_S * rate)))
    a, b = max(0, int(t0 * rate)), min(len(y), int(t1 * rate))
    if b - a <= win:
        return (t0 + t1) / 2
    power = np.concatenate(([0.0], np.cumsum(np.square(y[a:b], dtype=np.float64))))
    energy = power[win:] - power[:-win]
    return (a + int(np.argmin(energy)) + win / 2) / rate


def candidates_of(words: list[str], spans: list[Optional[tuple[float, float]]], y: npt.NDArray[np.float32], rate: int,
                  max_pad: float) -> list[Candidate]:
    """Pieces of one to MAX_WORDS words with a short text (``is_short_text``) between two cut points, best first."""
    n = len(words)
    duration = len(y) / rate
    cuts: list[Optional[float]] = [None] * (n + 1)  # cuts[k]: before word k (0: the clip's start, n: its end)
    if spans and spans[0] is not None:
        cuts[0] = 0.0
    if spans and spans[-1] is not None:
        cuts[n] = duration
    for k in range(1, n):
        left, right = spans[k - 1], spans[k]
        if left is not None and right is not None and right[0] - left[1] >= MIN_GAP_S:
            cuts[k] = quietest_point(y, rate, left[1], right[0])
    out: list[Candidate] = []
    for stop in range(n, 0, -1):  # pieces that end where the sentence ends first: they end as a sentence does
        for first in range(max(0, stop - MAX_WORDS), stop):  # longer runs first
            cut_before, cut_after = cuts[first], cuts[stop]
            if cut_before is None or cut_after is None or (first == 0 and stop == n):
                continue
            text = " ".join(words[first:stop])
            first_span, last_span = spans[first], spans[stop - 1]
            if (not is_short_text(text) or first_span is None or last_span is None
                    or any(spans[i] is None for i in range(first, stop))):
                continue
            start = max(cut_before, first_span[0] - max_pad)
            end = min(cut_after, last_span[1] + max_pad)
            out.append(Candidate(first, stop, start, end, text))
    return out


class WordAligner:
    """A clip's words located in its audio by CTC forced alignment (ingest's :func:`align_units`)."""

    def __init__(self, recognizer: Recognizer, window_s: float) -> None:
        self.rec = recognizer
        self.vocab = recognizer.processor.tokenizer.get_vocab()
        self.delimiter = self.vocab[recognizer.word_delimiter]
        self.fold = homophone_columns(self.vocab)
        self.frame_s = samples_per_frame(recognizer) / RATE
        self.window_s = window_s

    def unit(self, words: list[str]) -> tuple[TextUnit, list[int]]:
        """The text's CTC targets (spelt as ingest spells: scoring text), and the source word of each word."""
        targets: list[int] = []
        starts: list[int] = []
        spelt: list[str] = []
        owner: list[int] = []
        for i, word in enumerate(words):
            for part in scoring_text(word).split():
                ids = [self.vocab[ch] for ch in part if ch in self.vocab]
                if not ids:
                    continue
                if targets:
                    targets.append(self.delimiter)
                starts.append(len(targets))
                spelt.append(part)
                owner.append(i)
                targets.extend(ids)
        return TextUnit(0, " ".join(words), targets, starts, spelt), owner

    def word_spans(self, y: npt.NDArray[np.float32], rate: int, words: list[str],
                   min_score: float) -> Optional[list[Optional[tuple[float, float]]]]:
        """(start, end) seconds of each word (None: nothing in it the recogniser can spell), or None when the
        alignment is uncertain (score under ``min_score``, or the text does not fit the audio)."""
        unit, owner = self.unit(words)
        if not unit.targets:
            return None
        log_probs = fold_columns(log_probs_of(self.rec, resample(y, rate, RATE)), self.fold)
        analysis = Analysis(self.frame_s, log_probs, [0], [])
        aligned = align_units([unit], analysis, self.rec.blank_id, self.window_s, min_score, stage=STAGE)[0]
        if not aligned.found or aligned.score < min_score or not aligned.word_spans:
            return None
        spans: list[Optional[tuple[float, float]]] = [None] * len(words)
        for (s, e), i in zip(aligned.word_spans, owner):
            old = spans[i]
            t0, t1 = s * self.frame_s, e * self.frame_s
            spans[i] = (t0, t1) if old is None else (min(old[0], t0), max(old[1], t1))
        return spans

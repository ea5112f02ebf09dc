"""Checks decided in the main process: transcript checks before any audio is read, and the
checks that need every clip's audio result (chars per second, duplicates); plus output names.
The cut_ending measure the worker processes run is in ``levels.py`` (numpy only).

Duplicate policy (documented choice):

- ``duplicate_audio``: two clips whose processed 16-bit samples are identical (sha1 of the PCM)
  are the same recording whatever their file names or formats; the first clip by id is kept.
- ``duplicate_text``: the same normalised text *and* the same speaker. Different speakers
  reading the same sentence is useful data (parallel prompts are common in multi-speaker sets)
  and is kept; one speaker repeating a sentence is almost always a repeated row or a retake,
  which over-weights that sentence; the first clip by id is kept.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterable, Optional

if TYPE_CHECKING:  # type names only (audio.py does not import this module)
    from xtts_ft.data.audio import AudioResult

Normalizer = Callable[[str], object]  # returns str, or an object with a .text str (NormalizedText)
_UNSAFE = re.compile(r"[^\w.-]+")
MAX_NAME_BYTES = 150


def as_text_function(normalizer: Normalizer) -> Callable[[str], str]:
    """The text front-end as a plain str -> str function.

    ``normalizer`` may return a str or a NormalizedText-like object (its ``.text`` is used).
    """

    def wrapped(text: str) -> str:
        out = normalizer(text)
        out = getattr(out, "text", out)
        if not isinstance(out, str):
            raise TypeError(f"the text normaliser returned {type(out).__name__}, expected str or .text str")
        return out

    return wrapped


def check_text(
    raw: str, normalize: Callable[[str], str], max_chars: int, allowed_chars: Optional[Callable[[str], bool]]
) -> tuple[str, Optional[tuple[str, str]]]:
    """(normalised text with whitespace collapsed, rejection or None)."""
    text = " ".join(normalize(raw).split())
    if not text:
        was = f" (was {raw.strip()[:40]!r})" if raw.strip() else ""
        return text, ("empty_text", f"transcript is empty after normalisation{was}")
    if len(text) > max_chars:
        return text, ("text_too_long", f"{len(text)} characters after normalisation (max {max_chars})")
    if "|" in text:
        return text, ("unencodable_text", "holds '|', which the metadata format cannot store")
    if allowed_chars is not None:
        bad = sorted({c for c in text if c != " " and not allowed_chars(c)})
        if bad:
            shown = ", ".join(f"'{c}' U+{ord(c):04X} {unicodedata.name(c, '')}".rstrip() for c in bad[:5])
            more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
            return text, ("unencodable_text", f"characters the tokenizer cannot encode: {shown}{more}")
    return text, None


def assign_names(clip_ids: Iterable[str]) -> dict[str, str]:
    """A unique, file-system-safe WAV name per clip id ("sub/a b.flac" -> "sub__a_b.wav", "wavs/x.wav" -> "x.wav").

    Names that would collide (case-insensitively) get a short hash of the id appended, as do
    names shortened to stay under MAX_NAME_BYTES.
    """
    ids = sorted(set(clip_ids))
    stems = {}
    for cid in ids:
        stem = cid[5:] if cid.startswith("wavs/") else cid  # LJSpeech/coqui audio folder: no prefix needed
        stem = stem.rsplit(".", 1)[0] if "." in stem.rsplit("/", 1)[-1] else stem
        stem = _UNSAFE.sub("_", stem.replace("/", "__")).lstrip(".") or "clip"
        if len(stem.encode("utf-8")) > MAX_NAME_BYTES:
            stem = stem.encode("utf-8")[:MAX_NAME_BYTES].decode("utf-8", "ignore") + "-" + _short_hash(cid)
        stems[cid] = stem
    counts = Counter(s.lower() for s in stems.values())
    return {cid: (s if counts[s.lower()] == 1 else f"{s}-{_short_hash(cid)}") + ".wav" for cid, s in stems.items()}


def _short_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


class PostChecks:
    """noisy, chars_per_second, duplicate_audio and duplicate_text; feed clips in id order."""

    def __init__(self, min_cps: float, max_cps: float, min_snr_db: Optional[float] = None):
        self.min_cps, self.max_cps = min_cps, max_cps
        self.min_snr_db = min_snr_db
        self.audio_seen: dict[str, str] = {}
        self.text_seen: dict[tuple[str, str], str] = {}

    def check(self, clip_id: str, text: str, speaker: str, audio: AudioResult) -> Optional[tuple[str, str]]:
        if self.min_snr_db is not None and audio.snr_db is not None and audio.snr_db < self.min_snr_db:
            return "noisy", (f"SNR estimate {audio.snr_db:.1f} dB, below dataset.min_snr_db "
                             f"({self.min_snr_db:g} dB)")
        cps = len(text) / audio.duration_s
        if not self.min_cps <= cps <= self.max_cps:
            return "chars_per_second", (
                f"{cps:.1f} chars/s ({len(text)} chars in {audio.duration_s:.2f} s; "
                f"allowed {self.min_cps:g}-{self.max_cps:g})"
            )
        first = self.audio_seen.get(audio.pcm_sha1)
        if first is not None:
            return "duplicate_audio", f"same audio as {first}"
        first = self.text_seen.get((speaker, text))
        if first is not None:
            return "duplicate_text", f"same text and speaker as {first}"
        self.audio_seen[audio.pcm_sha1] = clip_id
        self.text_seen[(speaker, text)] = clip_id
        return None

"""Why a clip was not kept: the fixed list of rejection reasons, in the order they are checked.

Every clip the dataset names ends up either kept or rejected with exactly one of these
keys (the first check it fails). The keys are stable: reports, tests and the integrator
read them. Each comes with a short hint on what to do, used in ``report.txt``.
"""

from __future__ import annotations

from dataclasses import dataclass

# key -> what to do about it; dict order is the order the checks run in.
REASONS: dict[str, str] = {
    "bad_row": "fix the metadata line (too few columns or an empty audio field)",
    "outside_root": "move the audio inside the dataset folder and use a path relative to it",
    "missing_file": "add the audio (or transcript) file, or remove the entry",
    "empty_text": "write the transcript (it is empty after normalisation)",
    "text_too_long": "split the clip and its transcript, or raise dataset.max_text_chars",
    "unencodable_text": "remove or transliterate characters the tokenizer cannot encode",
    "unreadable": "could not be decoded: save audio as WAV or FLAC, transcripts as UTF-8 text (see the detail)",
    "empty_audio": "the file holds no samples; re-export it",
    "non_finite": "the file holds NaN/Inf samples; re-export it",
    "silent": "the clip is silent; check the recording",
    "clipped": "re-record or lower the gain (too many samples at full scale), or raise dataset.max_clipped_fraction",
    "too_short": "clip shorter than dataset.min_duration_s after trimming silence",
    "too_long": "split the clip (longer than dataset.max_duration_s after trimming silence)",
    "cut_ending": "the audio ends in speech (a word cut off): re-cut the clip after the last word, or raise "
    "dataset.cut_ending_margin_db",
    "noisy": "the SNR estimate (speech against the pauses' noise floor) is below dataset.min_snr_db: listen to it; "
    "re-record or denoise it, or lower dataset.min_snr_db (null: off) to keep it",
    "chars_per_second": "transcript and audio probably do not match; check both",
    "duplicate_audio": "the same audio appears more than once; the first clip (by id) is kept",
    "duplicate_text": "the same speaker says the same normalised text more than once; the first clip is kept",
    "transcript_mismatch": "the recogniser hears something else (see rejected.tsv): fix the transcript or drop the "
    "clip, or raise dataset.transcript_check",
}

# Reasons a worker process can return for the audio stage (all others are decided in the main process).
AUDIO_REASONS = ("unreadable", "empty_audio", "non_finite", "silent", "clipped", "too_short", "too_long", "cut_ending")


@dataclass(frozen=True)
class Rejection:
    """One rejected clip: its id, the reason key, a short detail, and where the dataset names it."""

    clip_id: str
    reason: str
    detail: str
    where: str = ""

    def __post_init__(self) -> None:
        if self.reason not in REASONS:  # a bug in this package, never user input
            raise ValueError(f"unknown rejection reason {self.reason!r}")

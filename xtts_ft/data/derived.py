"""Short clips derived from the training clips (``dataset.short_clips``): how many, and how they join the dataset.

Datasets of whole sentences hold almost nothing under 20 characters, and a model trained on them never learns
to say one word and stop. Prepare can add *pieces*: one to a few whole words of a training clip, cut at the
pauses around them. The pieces are made above the data layer (:mod:`xtts_ft.ingest.short_pieces`: the
recogniser aligns each clip's text to its audio); prepare receives that maker and calls :func:`add_pieces`
with the kept *training* clips only (an eval clip never gives a training piece).

In the prepared folder the pieces are marked as derived by where they live and by a file of their own:

- ``wavs/short/<source>__wA-B.wav``: words A..B (1-based) of the source clip, in the metadata of the
  source's split (always ``metadata_train.csv``);
- ``short_clips.tsv``: one row per piece (file, source clip, words, cut in the source, CER heard, text);
- ``report.json`` ``short_pieces``: the setting, how many were wanted and made, from how many clips, and
  how many candidates were dropped and why (``uncertain_alignment`` counts clips, the rest pieces).

The maker writes into a staging folder; only a finished set replaces ``wavs/short/`` (stage, then swap), so
a stop while pieces are being made leaves the prepared dataset as it was. Same dataset, same pieces: the
clips are taken in the order of a hash of their ids and nothing random is involved.
"""

from __future__ import annotations

import math
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Protocol, Union

from xtts_ft.config import SHORT_TEXT_CHARS, DatasetConfig
from xtts_ft.data.cache import CACHE_DIR, WAVS_DIR
from xtts_ft.data.report import PIECES_FILE, PieceRow, ShortPieces
from xtts_ft.tempfiles import atomic_write

SHORT_DIR = "short"  # wavs/short/: the derived pieces; prepare owns the folder and replaces it whole
STAGING_DIR = "short_pieces.partial"  # under .cache/: pieces being made


@dataclass(frozen=True)
class SourceClip:
    """A kept training clip as the maker sees it."""

    clip_id: str
    text: str  # the normalised transcript (metadata text)
    speaker: str
    wav: Path  # the prepared WAV


@dataclass
class DerivedPiece:
    name: str  # file name in wavs/short/
    text: str  # words first_word .. first_word + words - 1 of the source's text, joined by single spaces
    speaker: str
    source: str  # clip id of the source
    first_word: int  # 0-based index of its first word in the source's text
    words: int
    start_s: float  # cut in the source's prepared WAV
    end_s: float
    duration_s: float  # after the audio stage (trimmed)
    cer: float  # of what the recogniser heard
    heard: str


@dataclass
class PieceOutcome:
    pieces: list[DerivedPiece] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)  # reason -> candidates (clips for uncertain_alignment)
    clips_tried: int = 0


class PiecesUnavailable(Exception):
    """Raised by a maker that cannot make pieces for ``dataset.short_clips: auto`` (the report says why)."""


class PieceMaker(Protocol):
    def make(self, cfg: DatasetConfig, sources: list[SourceClip], wanted: int, folder: Path) -> PieceOutcome: ...


def pieces_wanted(setting: Union[float, str], min_share: float, target_share: float, kept: int, short: int) -> tuple[int, str]:
    """(pieces to add, why) for ``dataset.short_clips`` ``setting`` given ``short`` of ``kept`` clips are short.

    ``k`` pieces (each short) bring the share to (short + k) / (kept + k); the smallest k reaching the target.
    """
    if setting == "off":
        return 0, "dataset.short_clips is off"
    if kept == 0:
        return 0, "no clip was kept"
    share = short / kept if kept else 0.0
    target = target_share if setting == "auto" else float(setting)
    if setting == "auto" and share >= min_share:
        return 0, (f"{share:.1%} of clips are under {SHORT_TEXT_CHARS} characters already "
                   f"(dataset.short_clip_min_share {min_share:g})")
    if share >= target:
        return 0, f"{share:.1%} of clips are under {SHORT_TEXT_CHARS} characters already (target {target:g})"
    need = math.ceil((target * kept - short) / (1.0 - target) - 1e-9)
    return max(1, need), f"{share:.1%} of clips under {SHORT_TEXT_CHARS} characters; target {target:.0%}"


def add_pieces(cfg: DatasetConfig, out_dir: Path, sources: list[SourceClip], kept: int, short: int,
               maker: Optional[PieceMaker]) -> tuple[list[DerivedPiece], ShortPieces]:
    """Make the wanted pieces into a staging folder; returns (pieces, the report's ``short_pieces`` dict).

    Call :func:`install_pieces` afterwards to put them (or, with none, the absence of any) in place.
    """
    wanted, why = pieces_wanted(cfg.short_clips, cfg.short_clip_min_share, cfg.short_clips_target_share, kept, short)
    summary = ShortPieces(setting=cfg.short_clips, wanted=wanted, why=why, made=0, from_clips=0, clips_tried=0,
                          dropped={}, pieces=[])
    staging = Path(out_dir) / CACHE_DIR / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)  # a stopped run's leftovers (ours)
    if wanted == 0:
        return [], summary
    if maker is None:
        summary["why"] = (f"{why}; none made: no speech recogniser for this dataset (the prepare command loads "
                          f"none: run it through headless_train.py; a run's datasets in another language than "
                          f"run.language get none; or set dataset.short_clips: off)")
        return [], summary
    staging.mkdir(parents=True)
    try:
        outcome = maker.make(cfg, sources, wanted, staging)
    except PiecesUnavailable as exc:
        shutil.rmtree(staging, ignore_errors=True)
        summary["why"] = f"{why}; none made: {exc}"
        return [], summary
    except BaseException:  # a stop (StopRequested) or a failure: the dataset stays as it was
        shutil.rmtree(staging, ignore_errors=True)
        raise
    pieces = outcome.pieces
    summary["made"] = len(pieces)
    summary["from_clips"] = len({p.source for p in pieces})
    summary["clips_tried"] = outcome.clips_tried
    summary["dropped"] = dict(sorted(outcome.dropped.items()))
    summary["pieces"] = [PieceRow(file=f"{WAVS_DIR}/{SHORT_DIR}/{p.name}", source=p.source, text=p.text) for p in pieces]
    return pieces, summary


def install_pieces(out_dir: Path, pieces: list[DerivedPiece]) -> None:
    """wavs/short/ := the staged pieces (none: no folder); short_clips.tsv lists them."""
    out_dir = Path(out_dir)
    final = out_dir / WAVS_DIR / SHORT_DIR
    staging = out_dir / CACHE_DIR / STAGING_DIR
    shutil.rmtree(final, ignore_errors=True)  # the previous run's pieces: prepare wrote them
    if pieces:
        staging.replace(final)
    shutil.rmtree(staging, ignore_errors=True)
    rows = ["file\tsource\tfirst_word\twords\tstart_s\tend_s\tduration_s\tcer\ttext\theard"]
    rows += ["\t".join(str(v) for v in (f"{WAVS_DIR}/{SHORT_DIR}/{p.name}", p.source, p.first_word + 1, p.words,
                                         f"{p.start_s:.3f}", f"{p.end_s:.3f}", f"{p.duration_s:.3f}",
                                         f"{p.cer:.3f}", p.text, p.heard))
             for p in pieces]
    if pieces or (out_dir / PIECES_FILE).exists():
        atomic_write(out_dir / PIECES_FILE, "\n".join(rows) + "\n")


def piece_rows(pieces: list[DerivedPiece]) -> list[tuple[str, str, str]]:
    """Metadata rows of the pieces (relative to the prepared folder)."""
    return [(f"{WAVS_DIR}/{SHORT_DIR}/{p.name}", p.text, p.speaker) for p in pieces]

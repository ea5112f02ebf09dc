"""``python -m xtts_ft ingest AUDIO... [--text FILE | --subtitles FILE] --out DIR``.

Three ways to find clips in long recordings (see docs/data.md, "Ingest"):

- ``text``: the text's sentences are force-aligned to the audio (:mod:`.align`); clips are the
  sentences, cut in the pauses between them; a sentence the audio does not say is reported.
- ``vad``: no text; silero-vad finds speech, clips are cut at its pauses and transcribed by the
  recogniser (machine transcripts, marked as such).
- ``subtitles``: the cues' text is aligned to find how far the cues are off the speech (offset and
  drift); the cues, corrected by that fit and merged up to the longest clip, are cut at the
  nearest pause and scored by the alignment.

One streaming pass (:mod:`.analysis`) gives the recogniser's frames (and VAD's probabilities for
the modes that use them); everything after it works on those arrays, never on the whole audio.
"""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Optional, Sequence

from tqdm import tqdm

from xtts_ft.asr.recognizer import Recognizer
from xtts_ft.config import Config
from xtts_ft.ingest.align import AlignedUnit, align_units
from xtts_ft.ingest.analysis import Analysis, analyse
from xtts_ft.ingest.clips import Clip, Piece, plan_clips, split_long
from xtts_ft.ingest.endings import settle_endings
from xtts_ft.ingest.gaps import guard_unclaimed_speech, reject_overfull
from xtts_ft.ingest.output import IngestReport, LostText, SubtitleOffset, UnreadCueRow, write_dataset
from xtts_ft.ingest.source_audio import IngestError, SourceFile, open_sources
from xtts_ft.ingest.subtitles import UnreadCue, fit_offset, read_cues
from xtts_ft.ingest.text_units import Speller, split_sentences
from xtts_ft.ingest.vad import load_vad_model, pauses, snap_to_pause, speech_regions, transcribe_frames
from xtts_ft.output_folder import ADD, REFUSE, check_output, staged_output
from xtts_ft.stop_signals import StopSignals, raise_if_stopped

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise IngestError(f"{path}: text file not found; check the --text path")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise IngestError(f"{path}: not UTF-8 text; save the text as UTF-8") from None
    if not text.strip():
        raise IngestError(f"{path}: the text file is empty; give the text the recording reads, or leave out --text")
    return text


def _seconds_in_file(analysis: Analysis, frame: int) -> tuple[int, float]:
    file = analysis.file_of(frame)
    return file, (frame - analysis.file_frames[file]) * analysis.frame_s


def pieces_from_alignment(aligned: list[AlignedUnit], analysis: Analysis,
                          method: str = "alignment") -> tuple[list[Piece], list[Clip], list[LostText]]:
    """Pieces of the found sentences, clips rejected for crossing files, and the sentences not found."""
    pieces: list[Piece] = []
    rejected: list[Clip] = []
    lost: list[LostText] = []
    joinable = True
    for a in aligned:
        if not a.found:
            lost.append(LostText(sentence=a.unit.index + 1, text=a.unit.text, why=a.missing))
            joinable = False
            continue
        file, start = _seconds_in_file(analysis, a.start)
        end_file, end = _seconds_in_file(analysis, a.end - 1)
        if end_file != file:
            rejected.append(Clip(file, round(start, 3), round(analysis.sources[file].duration_s, 3), a.unit.text,
                                 a.score, method, [a.unit.index],
                                 rejection=("crosses_files", f"sentence {a.unit.index + 1} runs into the next file")))
            joinable = False
            continue
        end += analysis.frame_s
        spans = a.word_spans or []
        inner = [(_seconds_in_file(analysis, x[1])[1], _seconds_in_file(analysis, y[0])[1])
                 for x, y in zip(spans, spans[1:])]
        pieces.append(Piece(file, start, end, a.unit.text, a.score, method, [a.unit.index], inner,
                            list(a.unit.words), joinable))
        joinable = True
    return pieces, rejected, lost


def _text_clips(cfg: Config, analysis: Analysis, recognizer: Recognizer, text: str,
                report: IngestReport) -> list[Clip]:
    speller = Speller.for_recognizer(recognizer)
    units = speller.units(split_sentences(text))
    for u in units:
        for ch, n in u.unknown.items():
            report.unknown_letters[ch] = report.unknown_letters.get(ch, 0) + n
    aligned = align_units(units, analysis, recognizer.blank_id, cfg.ingest.window_s, cfg.ingest.min_score)
    pieces, rejected, lost = pieces_from_alignment(aligned, analysis)
    report.text_without_audio = lost
    rejected += guard_unclaimed_speech(pieces, analysis, recognizer, "alignment")
    d = cfg.dataset
    clips = plan_clips(pieces, [s.duration_s for s in analysis.sources], d.min_duration_s, d.max_duration_s,
                       cfg.ingest.max_pad_s, cfg.ingest.min_score)
    reject_overfull(clips, analysis, recognizer)
    return rejected + clips


def _vad_clips(cfg: Config, analysis: Analysis, recognizer: Recognizer) -> list[Clip]:
    d, ing = cfg.dataset, cfg.ingest
    pieces: list[Piece] = []
    for file, probs in enumerate(analysis.vad_probs):
        for region in speech_regions(probs, ing.vad_threshold, ing.min_pause_s, file):
            for part in split_long(region, d.max_duration_s):
                part.text, part.score = transcribe_frames(analysis, file, part.start, part.end, recognizer)
                part.inner_pauses, part.joinable = [], True
                pieces.append(part)
    return plan_clips(pieces, [s.duration_s for s in analysis.sources], d.min_duration_s, d.max_duration_s,
                      ing.max_pad_s, None, machine=True)


def _cue(a: AlignedUnit) -> tuple[float, float]:
    """The (start, end) of the subtitle cue a unit was made from (every unit of _subtitle_clips has one)."""
    assert a.unit.cue is not None
    return a.unit.cue


def _subtitle_clips(cfg: Config, analysis: Analysis, recognizer: Recognizer, path: Path,
                    report: IngestReport) -> list[Clip]:
    d, ing = cfg.dataset, cfg.ingest
    unread: list[UnreadCue] = []
    cues = read_cues(path, unread)
    report.unread_cues = [UnreadCueRow(line=u.line, timing=u.timing, text=u.text) for u in unread]
    for u in unread:
        log.warning("%s:%d: cue timing cannot be read (%s); its text is left out: %s", path, u.line, u.timing, u.text)
    speller = Speller.for_recognizer(recognizer)
    units = [speller.unit(i, c.text, (c.start, c.end)) for i, c in enumerate(cues)]
    aligned = align_units(units, analysis, recognizer.blank_id, ing.window_s, ing.min_score)
    good = [a for a in aligned if a.found and a.score >= ing.min_score]
    fit = fit_offset([_cue(a) for a in good],
                     [(analysis.time_of(a.start), analysis.time_of(a.end)) for a in good])
    usable = fit is not None and abs(fit.offset_s) <= ing.max_subtitle_offset_s
    if fit is None:
        summary = "no cue's text was found in the audio: offset unknown, cues used as they are"
    else:
        summary = (f"speech is {fit.offset_s:+.2f} s from the cues (drift {fit.drift_s_per_hour:+.2f} s per hour, "
                   f"from {fit.cues_used} cues, median residual {fit.residual_s:.2f} s)")
        summary += "; corrected" if usable else "; NOT corrected (over ingest.max_subtitle_offset_s)"
    found = SubtitleOffset(summary=summary, corrected=usable)
    if fit is not None:
        found["offset_s"] = round(fit.offset_s, 3)
        found["drift_s_per_hour"] = round(fit.drift_s_per_hour, 3)
        found["cues_used"] = fit.cues_used
        found["residual_s"] = round(fit.residual_s, 3)
    report.subtitle_offset = found
    log.info("subtitles: %s", summary)
    pieces: list[Piece] = []
    lost: list[LostText] = []
    for a in aligned:
        c0, c1 = _cue(a)
        shift = fit.at((c0 + c1) / 2) if fit is not None and usable else 0.0
        t0, t1 = c0 + shift, c1 + shift
        if not a.found:
            lost.append(LostText(sentence=a.unit.index + 1, text=a.unit.text, why=a.missing))
        if a.found and usable and a.score >= ing.min_score:  # where the speech is, not where a (clipped) cue says
            t0, t1 = analysis.time_of(a.start), analysis.time_of(a.end)
        file = analysis.file_of(analysis.frame_of(t0))
        offset = analysis.sources[file].offset_s
        score = a.score if a.found else 0.0
        pieces.append(Piece(file, max(0.0, t0 - offset), t1 - offset, a.unit.text, score, "subtitle", [a.unit.index]))
    report.text_without_audio = lost
    misplaced = fit is not None and not usable  # every clip is rejected below: no fences from misplaced cues
    unclaimed = [] if misplaced else guard_unclaimed_speech(pieces, analysis, recognizer, "subtitle")
    clips = plan_clips(pieces, [s.duration_s for s in analysis.sources], d.min_duration_s, d.max_duration_s,
                       ing.max_pad_s, ing.min_score, greedy=True)
    file_pauses = [pauses(p, ing.vad_threshold) for p in analysis.vad_probs]
    for clip in clips:
        start = round(max(clip.not_before, snap_to_pause(clip.start, file_pauses[clip.file], ing.max_pad_s, True)), 3)
        end = round(min(clip.not_after, snap_to_pause(clip.end, file_pauses[clip.file], ing.max_pad_s, False)), 3)
        if end - start <= d.max_duration_s or clip.duration > d.max_duration_s:  # snapping never makes it too long
            clip.start, clip.end = start, end
        if fit is not None and not usable and clip.rejection is None:
            clip.rejection = ("subtitle_offset", summary)
    reject_overfull(clips, analysis, recognizer)
    return unclaimed + clips


class IngestStopSignals(StopSignals):
    """The project's stop handler, with what a stop means for ingest in its log line."""

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:
        if not self.requested:
            log.warning("%s received: stopping ingest; the --out folder is left as it was (send it again to stop "
                        "at once)", signal.Signals(signum).name)
            self.requested, self.signal_name = True, signal.Signals(signum).name
            return
        super()._handle(signum, frame)


def ingest(cfg: Config, audio: Sequence[str | Path], out_dir: Path, text: Optional[Path] = None,
           subtitles: Optional[Path] = None, speaker: Optional[str] = None, recognizer: Optional[Recognizer] = None,
           on_existing: str = REFUSE) -> IngestReport:
    """Turn long recordings into a coqui-layout dataset in ``out_dir``; return the report.

    ``out_dir`` is written through :func:`xtts_ft.output_folder.staged_output` (``on_existing``: refuse,
    move-aside or add). SIGINT/SIGTERM raise :class:`StopRequested` within seconds, with ``out_dir``
    unchanged. No clip made: :class:`IngestError` (nothing written), with the reasons.
    """
    with IngestStopSignals():
        return _ingest(cfg, audio, Path(out_dir), text, subtitles, speaker, recognizer, on_existing)


def _ingest(cfg: Config, audio: Sequence[str | Path], out_dir: Path, text: Optional[Path],
            subtitles: Optional[Path], speaker: Optional[str], recognizer: Optional[Recognizer],
            on_existing: str) -> IngestReport:
    started = time.monotonic()
    if text is not None and subtitles is not None:
        raise IngestError("--text and --subtitles: give one of them (the text the audio reads, or its subtitles)")
    if not audio:
        raise IngestError("no audio files given; name one or more recordings in reading order")
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise IngestError(f"--out '{out_dir}' exists and is not a folder; choose another --out folder")
    check_output(out_dir, "ingest", on_existing, replace_own=False)  # before the long pass: a used --out fails now
    sources = open_sources(audio)
    mode = "text" if text is not None else "subtitles" if subtitles is not None else "vad"
    text_body = _read_text(Path(text)) if text is not None else None
    if subtitles is not None:
        read_cues(Path(subtitles))  # a bad subtitle file fails before the long pass over the audio
    if recognizer is None:
        recognizer = Recognizer.from_config(cfg.asr)
    vad_model = None
    if mode != "text":
        vad_model = load_vad_model()
    analysis = _analyse(sources, recognizer, cfg.ingest.block_s, vad_model)
    report = IngestReport(mode=mode, out_dir=str(out_dir), blocks_read=analysis.blocks_read)
    if text_body is not None:  # mode text
        clips = _text_clips(cfg, analysis, recognizer, text_body, report)
    elif subtitles is not None:
        clips = _subtitle_clips(cfg, analysis, recognizer, Path(subtitles), report)
    else:
        clips = _vad_clips(cfg, analysis, recognizer)
    clips.sort(key=lambda c: (c.file, c.start))
    report.endings_moved = settle_endings(clips, sources, cfg.dataset)  # no clip ends inside a word
    kept = sum(c.rejection is None for c in clips)
    if kept == 0:
        raise IngestError(_no_clips_message(clips, report, out_dir))
    with staged_output(out_dir, "ingest", on_existing, replace_own=False) as staged:
        adding = on_existing == ADD and staged.state.kind in ("ours", "foreign")
        report.added_to_existing = adding
        report.seconds = round(time.monotonic() - started, 2)
        write_dataset(clips, sources, staged.path, speaker or cfg.dataset.speaker_name, report, adding=adding)
    report.moved_aside = str(staged.moved_to) if staged.moved_to else None
    return report


def _no_clips_message(clips: list[Clip], report: IngestReport, out_dir: Path) -> str:
    rejections = [c.rejection for c in clips if c.rejection is not None]  # every clip: none was kept
    reasons: dict[str, int] = {}
    for reason, _ in rejections:
        reasons[reason] = reasons.get(reason, 0) + 1
    why = ", ".join(f"{n} rejected as {r}" for r, n in sorted(reasons.items())) or "no speech was found"
    if rejections:
        most = max(reasons, key=lambda r: reasons[r])
        why += f"; the first {most}: {next(detail for reason, detail in rejections if reason == most)}"
    if report.text_without_audio:
        why += f"; {len(report.text_without_audio)} sentence(s) of the text not found in the audio"
    return (f"no clips made ({why}); nothing was written to {out_dir}. Check that the audio is the reading of "
            f"the text (or lower ingest.min_score)")


def _analyse(sources: list[SourceFile], recognizer: Recognizer, block_s: float,
             vad_model: Optional[torch.jit.ScriptModule]) -> Analysis:
    total = sum(s.duration_s for s in sources)
    with tqdm(total=round(total, 1), unit="s audio", desc="ingest: listening", leave=False) as bar:

        def progress(seconds: float) -> None:
            raise_if_stopped("ingest: listening")
            bar.update(min(seconds, bar.total - bar.n))

        return analyse(sources, recognizer, block_s, vad_model, progress=progress)

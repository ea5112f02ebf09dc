"""Long recordings to a clean dataset: ``python -m xtts_ft ingest``.

- ``source_audio``: the recordings, read in bounded blocks (never a whole file in memory)
- ``analysis``: one streaming pass: the recogniser's CTC frames and silero-vad's speech probabilities
- ``text_units``: sentences split at Amharic punctuation, spelled in the recogniser's letters
- ``align``: windowed CTC forced alignment of a long text; sentences with no audio reported
- ``vad``: speech regions and pauses; machine transcripts from the recogniser's frames
- ``subtitles``: SRT/VTT cues and the fitted offset/drift between cues and speech
- ``clips``: split long pieces, merge short ones, cut in the pauses; reject with a reason
- ``output``: the clips, metadata.csv, segments.tsv and the ingest report
- ``short_pieces``: short pieces of a prepared dataset's own clips (prepare's ``dataset.short_clips``)
- ``command``: the three modes put together
"""

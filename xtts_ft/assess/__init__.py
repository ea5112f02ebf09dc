"""Listening to audio as a listener would, with a transcript where there is one.

- ``listener``: :class:`Listener`: a clip's predicted quality (DNSMOS), SNR estimate and, given its text and
  the run's recogniser, the seconds of speech after the text's last word (``tail_s``) and the CER; the
  evaluation listens to its samples through it;
- ``command``: ``python -m xtts_ft assess``: one TSV row per audio file.

Above ingest: the text is aligned to the audio with ingest's word aligner, as the short pieces are.
"""

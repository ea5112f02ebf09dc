"""A voice's conditioning latents: computed once per clip content, again when its file changes."""

from __future__ import annotations

import os
import shutil

from tests.serve.servehelpers import VOICE_CLIP
from xtts_ft.serve.voices import VoiceLibrary


def test_latents_are_computed_once_per_content_and_again_when_the_file_changes(tmp_path, monkeypatch):
    folder = tmp_path / "voices"
    folder.mkdir()
    shutil.copyfile(VOICE_CLIP, folder / "ana.flac")
    shutil.copyfile(VOICE_CLIP, folder / "copy.flac")  # the same bytes under another name
    library = VoiceLibrary(folder=folder)
    computed: list[bytes] = []

    def compute(path):
        with open(path, "rb") as clip:  # (not Path.read_bytes: that counts the library's reads)
            computed.append(clip.read())
        return (len(computed),)

    reads = []
    real_read = type(folder).read_bytes
    monkeypatch.setattr(type(folder), "read_bytes", lambda self: reads.append(self.name) or real_read(self))
    ana = library.get("ana")
    assert library.latents(ana, compute) == (1,)
    assert [library.latents(ana, compute) for _ in range(5)] == [(1,)] * 5
    assert library.latents(library.get("copy"), compute) == (1,)  # same bytes: reused
    assert reads.count("ana.flac") == 1, "an unchanged clip is not read and hashed again for every piece"

    other = (folder / "ana.flac").read_bytes() + b"\0"  # new content (flac ignores trailing bytes)
    (folder / "ana.flac").write_bytes(other)
    stat = os.stat(folder / "ana.flac")
    os.utime(folder / "ana.flac", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert library.latents(ana, compute) == (2,) and computed[-1] == other
    assert library.latents(ana, compute) == (2,) and library.cached_clips() == 2

"""The incremental cache of data preparation: which clips were already processed, and with what result.

``<out_dir>/.cache/manifest.json`` maps each clip id to the key it was processed under
(source path + size + mtime + every audio setting + output name + pipeline version) and the
audio-stage result (kept duration and PCM hash, or the rejection). A clip whose key is
unchanged, and whose WAV is still on disk when it passed, is not processed again.

Processed WAVs of clips that pass the audio stage but are not kept this run (rejected by a
later check such as duplicates or chars/s) are parked in ``.cache/unused_wavs/`` so that
``wavs/`` holds exactly the clips in the metadata, and a later run can take them back
without decoding again. Clips that left the dataset lose their WAV and their cache entry.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Iterable, Optional

from xtts_ft.data.audio import AudioResult, AudioSettings
from xtts_ft.json_types import JsonObject
from xtts_ft.tempfiles import atomic_write, remove_stray_parts

log = logging.getLogger(__name__)

PIPELINE_VERSION = 2  # bump when the audio processing changes: every clip is processed again (2: the SNR estimate)
CACHE_DIR = ".cache"
WAVS_DIR = "wavs"


def clip_key(rel_src: str, size: int, mtime_ns: int, settings: AudioSettings, name: str) -> str:
    blob = json.dumps([PIPELINE_VERSION, rel_src, size, mtime_ns, dataclasses.asdict(settings), name], sort_keys=True)
    return hashlib.sha1(blob.encode("utf-8")).hexdigest()


class Manifest:
    """Cache entries by clip id: {"key", "name", "reason", "detail", "duration_s", "pcm_sha1", "snr_db"}."""

    def __init__(self, out_dir: Path, root: Path):
        self.out_dir = out_dir
        self.root = str(root)
        self.path = out_dir / CACHE_DIR / "manifest.json"
        self.wavs = out_dir / WAVS_DIR
        self.held = out_dir / CACHE_DIR / "unused_wavs"
        self.entries: dict[str, JsonObject] = {}

    @classmethod
    def load(cls, out_dir: Path, root: Path) -> Manifest:
        """The previous run's manifest, or an empty one (other dataset, other version, damaged file)."""
        m = cls(out_dir, root)
        if not m.path.is_file():
            return m
        try:
            data = json.loads(m.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            log.warning("cache manifest %s is unreadable (%s); every clip is processed again", m.path, exc)
            return m
        if not isinstance(data, dict) or data.get("version") != PIPELINE_VERSION or data.get("root") != m.root:
            log.info("cache manifest %s is for another dataset or version; every clip is processed again", m.path)
            stale = data.get("clips", {}) if isinstance(data, dict) else {}
            for entry in stale.values() if isinstance(stale, dict) else ():
                if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                    m._delete_wav(entry["name"])  # our own output from before; it is rewritten if still wanted
            return m
        m.entries = {k: v for k, v in data.get("clips", {}).items() if isinstance(v, dict) and "key" in v}
        return m

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"version": PIPELINE_VERSION, "root": self.root, "clips": self.entries}
        atomic_write(self.path, json.dumps(payload, ensure_ascii=False, separators=(",", ":")))

    def _has_wav(self, name: str) -> bool:
        return (self.wavs / name).is_file() or (self.held / name).is_file()

    def lookup(self, clip_id: str, key: str) -> Optional[AudioResult]:
        """The cached result when the key matches (and the WAV still exists for a passed clip)."""
        e = self.entries.get(clip_id)
        if e is None or e["key"] != key:
            return None
        if e["reason"] is None and not self._has_wav(e["name"]):
            return None
        return AudioResult(clip_id, e["reason"], e.get("detail", ""), e.get("duration_s", 0.0), e.get("pcm_sha1", ""),
                           e.get("snr_db"))

    def store(self, key: str, name: str, result: AudioResult) -> None:
        old = self.entries.get(result.clip_id)
        if old is not None and old.get("name") != name:
            self._delete_wav(old.get("name"))
        if result.reason is not None:
            self._delete_wav(name)
        self.entries[result.clip_id] = {
            "key": key,
            "name": name,
            "reason": result.reason,
            "detail": result.detail,
            "duration_s": round(result.duration_s, 4),
            "pcm_sha1": result.pcm_sha1,
            "snr_db": result.snr_db,
        }

    def _delete_wav(self, name: Optional[str]) -> None:
        if name and name == Path(name).name and not name.startswith("."):
            for folder in (self.wavs, self.held):
                (folder / name).unlink(missing_ok=True)

    def place(self, kept_names: set[str], current_ids: Iterable[str]) -> int:
        """wavs/ := the kept clips; other passed clips -> unused_wavs/; clips gone from the dataset deleted.

        Returns how many cache entries were dropped because their clip left the dataset.
        """
        current = set(current_ids)
        self.wavs.mkdir(parents=True, exist_ok=True)
        self.held.mkdir(parents=True, exist_ok=True)
        gone = [cid for cid in self.entries if cid not in current]
        for cid in gone:
            self._delete_wav(self.entries.pop(cid).get("name"))
        for e in self.entries.values():
            if e["reason"] is not None:
                continue
            name = e["name"]
            src, dst = (self.held, self.wavs) if name in kept_names else (self.wavs, self.held)
            if (src / name).is_file():
                os.replace(src / name, dst / name)
        remove_stray_parts(self.wavs)  # only leftovers of dead writers: a live rank may be writing
        return len(gone)

"""Read a Hugging Face ``datasets`` dataset (local parquet/arrow, or a Hub id with a split) into clip entries.

Audio columns are cast to ``Audio(decode=False)``: ``datasets`` >= 4 decodes audio through
torchcodec, which this project does not install, and the project's own decoder (soundfile, then
ffmpeg) must be the one that reads every clip, as for the folder layouts. Each row's audio bytes
are written once to ``<out_dir>/.cache/hf_audio/`` (rewritten only when they change, so the
prepare cache keeps its results across runs) and go through the same audio stage as any file.

Every row becomes one :class:`SourceEntry`: a row with no audio (no bytes and no readable path)
is ``missing_file``; empty text is caught by the transcript check; bad bytes by the decoder
(``unreadable``). Hub ids are downloaded into the ``datasets`` cache; with no network (or
``HF_HUB_OFFLINE=1``) and nothing cached, a one-line DataError says how to get the data.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from huggingface_hub.errors import HfHubHTTPError

from xtts_ft.base_model import offline_download_hint
from xtts_ft.data.entries import SourceEntry
from xtts_ft.data.readers import AUDIO_EXTENSIONS
from xtts_ft.errors import DataError
from xtts_ft.tempfiles import atomic_write

if TYPE_CHECKING:  # names for annotations only: datasets is imported when a dataset is read (load_rows)
    import datasets
    from xtts_ft.config import DatasetConfig

log = logging.getLogger(__name__)

AUDIO_CACHE = Path(".cache") / "hf_audio"
SAVE_TO_DISK_FILES = ("state.json", "dataset_dict.json")  # markers of a datasets.save_to_disk folder


def source_label(cfg: DatasetConfig) -> str:
    """What the report calls this dataset: the resolved local path, or hf:<id>[/<name>]:<split>."""
    if Path(cfg.path).exists():
        return str(Path(cfg.path).resolve())
    name = f"/{cfg.hf_name}" if cfg.hf_name else ""
    return f"hf:{cfg.path}{name}:{cfg.hf_split}"


def _local_files(path: Path) -> tuple[str, list[str]]:
    """(builder, data files) of a local parquet/arrow file, or of a folder holding them."""
    if path.is_file():
        kind = path.suffix.lower().lstrip(".")
        if kind not in ("parquet", "arrow"):
            raise DataError(f"dataset.path: '{path}' is not a .parquet or .arrow file; format hf reads those")
        return kind, [str(path)]
    for kind in ("parquet", "arrow"):
        files = sorted(str(p) for p in path.rglob(f"*.{kind}") if not any(s.startswith(".") for s in p.parts))
        if files:
            return kind, files
    raise DataError(f"dataset.path: folder '{path}' holds no .parquet or .arrow file (format hf)")


def load_rows(cfg: DatasetConfig, cache_dir: Path) -> datasets.Dataset:
    """The ``datasets.Dataset`` of cfg's split, audio column not decoded."""
    import datasets

    path = Path(cfg.path)
    if path.is_dir() and any((path / m).is_file() for m in SAVE_TO_DISK_FILES):
        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            if cfg.hf_split not in ds:
                raise DataError(f"dataset.hf_split: '{cfg.hf_split}' is not a split of '{path}' "
                                f"(it has {', '.join(ds)})")
            ds = ds[cfg.hf_split]
    elif path.is_file():
        builder, files = _local_files(path)
        ds = datasets.load_dataset(builder, data_files={cfg.hf_split: files}, split=cfg.hf_split,
                                   cache_dir=str(cfg.hf_cache_dir or cache_dir))
    elif path.exists():
        _local_files(path)  # a folder with no parquet/arrow file is a one-line error, not datasets' own
        # a folder (e.g. from `hf download --repo-type dataset`): datasets tells the splits from the file names
        # (data/train-*.parquet, data/test-*.parquet) and the configurations from the README, as on the Hub
        try:
            ds = datasets.load_dataset(str(path), cfg.hf_name, split=cfg.hf_split,
                                       cache_dir=str(cfg.hf_cache_dir or cache_dir))
        except ValueError as exc:  # unknown split or configuration
            raise DataError(f"dataset '{path}': {str(exc).splitlines()[0]}; set dataset.hf_split / hf_name") from None
    else:
        ds = _load_hub(cfg)
    missing = [c for c in (cfg.audio_column, cfg.text_column, cfg.speaker_column) if c and c not in ds.column_names]
    if missing:
        raise DataError(f"dataset '{cfg.path}': no column {', '.join(missing)} (it has {', '.join(ds.column_names)}); "
                        f"set dataset.audio_column / text_column / speaker_column")
    if isinstance(ds.features[cfg.audio_column], datasets.Audio):
        ds = ds.cast_column(cfg.audio_column, datasets.Audio(decode=False))  # no torchcodec: we decode the bytes
    return ds


def _load_hub(cfg: DatasetConfig) -> datasets.Dataset:
    import datasets
    try:
        return datasets.load_dataset(cfg.path, cfg.hf_name, split=cfg.hf_split, revision=cfg.hf_revision,
                                     cache_dir=cfg.hf_cache_dir)
    # not found and not cached: datasets raises ConnectionError offline or when the Hub cannot be reached,
    # FileNotFoundError when the Hub answers that there is no such file, DatasetNotFoundError for unknown ids
    except (ConnectionError, TimeoutError, FileNotFoundError, HfHubHTTPError,
            datasets.exceptions.DatasetNotFoundError) as exc:
        hint = offline_download_hint(cfg.path).replace("hf download", "hf download --repo-type dataset")
        raise DataError(
            f"dataset '{cfg.path}' (split {cfg.hf_split}) could not be loaded from the Hugging Face Hub and is not in "
            f"the cache ({type(exc).__name__}: {str(exc).splitlines()[0][:160]}); on a connected machine run {hint}, "
            f"copy DIR here and set dataset.path to DIR (or connect and unset HF_HUB_OFFLINE)"
        ) from None


def _suffix(name: Optional[str]) -> str:
    suffix = Path(name or "").suffix.lower()
    return suffix if suffix in AUDIO_EXTENSIONS else ".audio"  # the decoder reads the content, not the name


def _write_if_changed(path: Path, data: bytes) -> None:
    """Write the bytes unless the file already holds them (an unchanged mtime keeps the prepare cache valid)."""
    if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
        return
    atomic_write(path, data)


def _file_of(ref: str, base: Optional[Path]) -> Optional[Path]:
    for candidate in [Path(ref)] + ([base / ref] if base is not None else []):
        if candidate.is_file():
            return candidate.resolve()
    return None


def _audio_of(value: object) -> tuple[Optional[bytes], Optional[str]]:
    """(bytes, path) from an undecoded Audio value, raw bytes, or a path string."""
    if isinstance(value, dict):
        return value.get("bytes"), value.get("path")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value), None
    if isinstance(value, str):
        return None, value
    return None, None


def read_hf(cfg: DatasetConfig, out_dir: Path) -> list[SourceEntry]:
    """One entry per row of the split; audio bytes extracted under out_dir/.cache/hf_audio/."""
    ds = load_rows(cfg, out_dir / ".cache" / "hf_datasets")
    folder = out_dir / AUDIO_CACHE
    folder.mkdir(parents=True, exist_ok=True)
    columns = [c for c in (cfg.audio_column, cfg.text_column, cfg.speaker_column) if c]
    # a row naming its audio by path only: relative to the dataset's folder (or the file's), as written next to it
    local = Path(cfg.path)
    base = (local if local.is_dir() else local.parent) if local.exists() else None
    entries = []
    for i, row in enumerate(ds.select_columns(columns)):
        clip_id = f"{cfg.hf_split}/{i:07d}"
        data, ref = _audio_of(row[cfg.audio_column])
        where = f"row {i}" + (f" ({ref})" if ref else "")
        text = row[cfg.text_column] if isinstance(row[cfg.text_column], str) else ""
        speaker = str(row[cfg.speaker_column]).strip() if cfg.speaker_column and row[cfg.speaker_column] else ""
        entry = SourceEntry(clip_id=clip_id, where=where, text=text.strip(), speaker=speaker or cfg.speaker_name)
        if data:
            entry.audio = folder / f"{i:07d}{_suffix(ref)}"
            _write_if_changed(entry.audio, data)
        elif ref and _file_of(ref, base) is not None:
            entry.audio = _file_of(ref, base)
        else:
            entry.rejection = ("missing_file", "the row holds no audio bytes" + (f" and '{ref}' is not a file" if ref
                                                                                 else " and no path"))
        entries.append(entry)
    if not entries:
        raise DataError(f"dataset '{cfg.path}' split {cfg.hf_split}: no rows; check dataset.hf_split")
    log.info("read %d rows from %s", len(entries), source_label(cfg))
    return entries

"""Find the base XTTS-v2 model: a local directory, or a Hugging Face repo fetched into its cache.

A base model is a directory in the coqui/XTTS-v2 file layout. Only the files the fine-tune
needs are fetched (``hf_hub_download`` per file: resumable, cached, no other files).
Writing a tiny random model (``base_model.create_tiny``) is not this module's decision: it sits in the
models layer's lowest module, so :func:`xtts_ft.random_model.resolve_or_create_base_model` (above it)
writes the folder first and then asks this module for its files.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import httpx2  # the HTTP client huggingface_hub 2.x sends every request with
from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError

from xtts_ft.config import BaseModelConfig
from xtts_ft.errors import ModelError
from xtts_ft.model_folder import OPTIONAL_FILES, REQUIRED_FILES, ModelFolder

log = logging.getLogger(__name__)

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

# fetcher(repo_id, filename, revision, cache_dir) -> local path of the downloaded file
Fetcher = Callable[[str, str, Optional[str], Optional[str]], str]


@dataclass(frozen=True)
class BaseModelFiles:
    """Paths of one base model's files (all in the XTTS-v2 layout)."""

    root: Path
    config_json: Path
    model_pth: Path
    vocab_json: Path
    dvae_pth: Path
    mel_stats_pth: Path
    speakers_pth: Optional[Path]

    @classmethod
    def from_dir(cls, root: Path) -> BaseModelFiles:
        """A base model folder, or an export (complete since it carries dvae.pth: a further fine-tune's base)."""
        folder = ModelFolder(root)
        missing = folder.missing()
        if missing:
            if folder.export_meta.is_file():  # exports written before they carried the DVAE
                raise ModelError(
                    f"base model folder '{root}' is an export without {', '.join(missing)}; export the checkpoint "
                    f"again with this version (exports now carry every base-model file) to train on top of it"
                )
            raise ModelError(
                f"base model folder '{root}' lacks {', '.join(missing)}; it needs the coqui/XTTS-v2 files "
                f"({', '.join(REQUIRED_FILES)})"
            )
        return cls(
            root=folder.root,
            config_json=folder.config_json,
            model_pth=folder.model,
            vocab_json=folder.vocab,
            dvae_pth=folder.dvae,
            mel_stats_pth=folder.mel_stats,
            speakers_pth=folder.speakers if folder.speakers.is_file() else None,
        )


def is_repo_id(source: str) -> bool:
    """'coqui/XTTS-v2' is a repo id; './models/xtts', '/abs/path' and existing folders are not."""
    if Path(source).expanduser().exists() or source.startswith((".", "/", "~")):
        return False
    return bool(_REPO_ID.match(source))


def offline_download_hint(repo_id: str) -> str:
    """The command that fetches ``repo_id`` on a connected machine (the ``hf`` CLI of the pinned huggingface_hub;
    its older ``huggingface-cli`` is no longer installed)."""
    return f"`hf download {repo_id} --local-dir DIR` (huggingface_hub's command line)"


@dataclass(frozen=True)
class RetryPolicy:
    """How patiently an unreachable Hub is asked before the cache alone is used.

    One metadata request per model (its first file) says whether the Hub answers; it is tried
    ``retries + 1`` times, ``wait_s`` apart (doubling). When all tries fail, the model's files are read
    from the cache alone, and "no network and not cached" is one line naming the command that fetches
    them. The default is one try: offline, the answer comes at once (huggingface_hub's own patience, five
    retries 1-8 s apart, each warning printed, took ~25 s to say the same). ``retries=None`` leaves the
    waiting to huggingface_hub.
    """

    retries: Optional[int] = 0
    wait_s: float = 1.0


def hf_fetcher(endpoint: Optional[str] = None, retry: RetryPolicy = RetryPolicy()) -> Fetcher:
    """The real fetcher: huggingface_hub's per-file download into its cache (resumes partial files)."""
    offline: dict[tuple[str, Optional[str]], bool] = {}  # (repo, revision) -> the Hub did not answer: cache only

    def reachable(repo_id: str, filename: str, revision: Optional[str], retries: int) -> bool:
        url = hf_hub_url(repo_id, filename, revision=revision, endpoint=endpoint)
        failure = None
        for attempt in range(retries + 1):
            if attempt:
                time.sleep(retry.wait_s * 2 ** (attempt - 1))
            try:
                get_hf_file_metadata(url)
                return True
            except HfHubHTTPError:  # the Hub answered (missing file, auth...): hf_hub_download reports it
                return True
            except (httpx2.TransportError, OSError) as exc:
                failure = f"{type(exc).__name__}: {exc}"
                log.info("hub at %s not reachable (%s), try %d of %d", url, exc, attempt + 1, retries + 1)
        log.warning("%s: the Hub (%s) does not answer (%s); reading %s from the local cache only", repo_id,
                    endpoint or "huggingface.co", failure, repo_id)
        return False

    def fetch(repo_id: str, filename: str, revision: Optional[str], cache_dir: Optional[str]) -> str:
        key = (repo_id, revision)
        if retry.retries is not None and key not in offline:  # asked once per model, not once per file
            offline[key] = not reachable(repo_id, filename, revision, retry.retries)
        local: str = hf_hub_download(  # the file's path in the cache
            repo_id=repo_id, filename=filename, revision=revision, cache_dir=cache_dir, endpoint=endpoint,
            local_files_only=offline.get(key, False),
        )
        return local

    return fetch


def _download(cfg: BaseModelConfig, fetcher: Fetcher) -> BaseModelFiles:
    paths: dict[str, Path] = {}
    for name in REQUIRED_FILES + OPTIONAL_FILES:
        try:
            paths[name] = Path(fetcher(cfg.source, name, cfg.revision, cfg.cache_dir))
        except LocalEntryNotFoundError:  # a subclass of EntryNotFoundError: must come first
            if name in OPTIONAL_FILES:
                log.info("base model: optional %s not available offline; continuing without it", name)
                continue
            raise ModelError(
                f"base_model.source: cannot download '{cfg.source}' (no network, and {name} is not in the cache). "
                f"On a connected machine run {offline_download_hint(cfg.source)}, copy DIR "
                f"here and set base_model.source: DIR (if '{cfg.source}' is meant as a local folder: it does not exist)"
            ) from None
        except EntryNotFoundError:
            if name in OPTIONAL_FILES:
                continue
            raise ModelError(f"base_model.source: repo '{cfg.source}' has no {name}; is it an XTTS-v2 repo?") from None
        except HfHubHTTPError as exc:
            raise ModelError(f"base_model.source: downloading {name} from '{cfg.source}' failed: {exc}") from None
        log.info("base model file %s -> %s", name, paths[name])
    folders = {p.parent for p in paths.values()}
    if len(folders) != 1:  # the hub cache keeps a snapshot folder per revision; all files land in one
        raise ModelError(f"base_model.source: files of '{cfg.source}' landed in different folders: {sorted(folders)}")
    return BaseModelFiles.from_dir(folders.pop())


def resolve_base_model(cfg: BaseModelConfig, fetcher: Optional[Fetcher] = None) -> BaseModelFiles:
    """Return the base model's files, downloading them when ``cfg.source`` is a repo id.

    A missing local folder is an error here; ``base_model.create_tiny`` is honoured by
    :func:`xtts_ft.random_model.resolve_or_create_base_model`, which writes it before calling this.
    """
    if is_repo_id(cfg.source) and not cfg.create_tiny:  # create_tiny always names a local folder
        return _download(cfg, fetcher or hf_fetcher())
    root = Path(cfg.source).expanduser()
    if not root.exists():
        raise ModelError(
            f"base_model.source: folder '{root}' does not exist; point it at an XTTS-v2 folder or a repo id "
            f"such as coqui/XTTS-v2"
        )
    if not root.is_dir():
        raise ModelError(f"base_model.source: '{root}' is a file; it must be a folder in the XTTS-v2 layout")
    return BaseModelFiles.from_dir(root)

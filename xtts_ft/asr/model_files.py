"""Find the speech recogniser: a local folder, or a Hugging Face repo fetched once into its cache.

The same rules as the base model (:mod:`xtts_ft.base_model`): a repo id is fetched file by file
with ``hf_hub_download`` (cached, resumable, only the files a CTC model needs), ``HF_HUB_OFFLINE=1``
serves it from the cache, and no network with an empty cache is one line that says what to do.
A folder that does not exist is an error; nothing else is ever used in its place.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, LocalEntryNotFoundError

from xtts_ft.base_model import Fetcher, hf_fetcher, is_repo_id, offline_download_hint
from xtts_ft.config import AsrConfig
from xtts_ft.errors import ModelError

log = logging.getLogger(__name__)

REQUIRED_FILES = ("config.json", "vocab.json")
# One of each group must exist: the weights (safetensors first: no pickle), and the feature
# extractor settings (older transformers write preprocessor_config.json, 5.x processor_config.json).
ONE_OF = (("model.safetensors", "pytorch_model.bin"), ("preprocessor_config.json", "processor_config.json"))
OPTIONAL_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")


def _check_folder(root: Path, what: str) -> Path:
    missing = [f for f in REQUIRED_FILES if not (root / f).is_file()]
    missing += [" or ".join(group) for group in ONE_OF if not any((root / f).is_file() for f in group)]
    if missing:
        raise ModelError(
            f"asr.model: {what} '{root}' lacks {', '.join(missing)}; it needs a transformers CTC model "
            f"(config.json, weights, preprocessor/processor config, vocab.json)"
        )
    return root


def _offline_message(cfg: AsrConfig, name: str) -> str:
    return (
        f"asr.model: cannot download '{cfg.model}' (no network, and {name} is not in the cache). On a connected "
        f"machine run {offline_download_hint(cfg.model)}, copy DIR here and set asr.model: DIR "
        f"(if '{cfg.model}' is meant as a local folder: it does not exist)"
    )


def _download(cfg: AsrConfig, fetcher: Fetcher) -> Path:
    paths: list[Path] = []

    def fetch(name: str, optional: bool) -> bool:
        try:
            paths.append(Path(fetcher(cfg.model, name, cfg.revision, cfg.cache_dir)))
            return True
        except LocalEntryNotFoundError:  # a subclass of EntryNotFoundError: must come first
            if optional:
                return False
            raise ModelError(_offline_message(cfg, name)) from None
        except EntryNotFoundError:
            if optional:
                return False
            raise ModelError(f"asr.model: repo '{cfg.model}' has no {name}; is it a transformers CTC model?") from None
        except HfHubHTTPError as exc:
            raise ModelError(f"asr.model: downloading {name} from '{cfg.model}' failed: {exc}") from None

    for name in REQUIRED_FILES:
        fetch(name, optional=False)
    for group in ONE_OF:  # the first of a group that exists; the others are not fetched
        if not any(fetch(name, optional=True) for name in group):
            raise ModelError(f"asr.model: repo '{cfg.model}' has no {' or '.join(group)} (or it is not cached)")
    for name in OPTIONAL_FILES:
        fetch(name, optional=True)
    folders = {p.parent for p in paths}
    if len(folders) != 1:  # the hub cache keeps one snapshot folder per revision; all files land in it
        raise ModelError(f"asr.model: files of '{cfg.model}' landed in different folders: {sorted(folders)}")
    return folders.pop()


def resolve_asr_model(cfg: AsrConfig, fetcher: Optional[Fetcher] = None) -> Path:
    """The folder holding the recogniser's files, downloading them first when asr.model is a repo id."""
    if is_repo_id(cfg.model):
        root = _download(cfg, fetcher or hf_fetcher())
        log.info("speech recogniser %s -> %s", cfg.model, root)
        return _check_folder(root, "download of")
    root = Path(cfg.model).expanduser()
    if not root.is_dir():
        raise ModelError(AsrConfig.missing_folder("asr.model", root))
    return _check_folder(root, "folder")

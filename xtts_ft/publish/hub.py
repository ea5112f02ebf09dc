"""``python -m xtts_ft publish``: write the folder to share (export + model card + samples), then upload it.

The folder is built in a staging sibling and swapped into place (:func:`xtts_ft.tempfiles.replace_dir`);
an existing ``--out`` is replaced only when this command wrote it (it holds :data:`PUBLISH_RECORD`).
Export files are hard-linked when the disk allows (an export is never changed in place: a new export
is a new folder swapped in), copied otherwise. ``--dry-run`` stops after the folder.

The upload is huggingface_hub's ``create_repo`` + ``upload_folder``. Being offline, having no token
or a token the Hub refuses each end in one line saying what to do, checked before the (possibly
long) export so a mistake costs seconds.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import httpx2  # the HTTP client huggingface_hub 2.x sends every request with
from huggingface_hub import HfApi, get_token
from huggingface_hub.constants import is_offline_mode
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled
from huggingface_hub.utils import HFValidationError, validate_repo_id

from xtts_ft import __version__
from xtts_ft.errors import UserError
from xtts_ft.evaluate.export import export_from_checkpoint
from xtts_ft.inference.checkpoint_folder import base_for_checkpoint
from xtts_ft.json_types import JsonObject
from xtts_ft.layout import OUTPUT_MARKER
from xtts_ft.model_folder import EXPORT_META
from xtts_ft.publish.card import BASE_MODEL, CardFacts, gather_facts, read_json, render_card
from xtts_ft.serve.model_source import ResolvedModel, resolve_model
from xtts_ft.tempfiles import atomic_write, replace_dir

log = logging.getLogger(__name__)

PUBLISH_RECORD = "xtts_ft_publish.json"  # marks a folder this command wrote; uploaded too (the card's facts)
CARD_FILE = "README.md"  # the Hub reads the model card from here
SAMPLES_SUBDIR = "samples"
LOGIN_HINT = "run `hf auth login` (or set HF_TOKEN) with a token that has write access"


class PublishError(UserError):
    """The voice cannot be published: offline, not logged in, refused by the Hub, or a bad --repo-id/--out."""


@dataclass
class PublishResult:
    folder: Path
    url: Optional[str]  # None for --dry-run
    files: list[str]


def check_repo_id(repo_id: str) -> None:
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise PublishError(f"--repo-id {repo_id!r}: not a valid Hub repo id ({exc}); use OWNER/NAME") from None
    if repo_id.count("/") != 1:
        raise PublishError(f"--repo-id {repo_id!r}: give it as OWNER/NAME (your user or organisation name, "
                           f"e.g. alice/xtts-amharic)")


def _network_errors() -> tuple[type[Exception], ...]:
    return (httpx2.TransportError, OSError)


def _hub_failure(exc: Exception, repo_id: str, doing: str) -> PublishError:
    """One line for whatever the Hub (or the network) said."""
    said = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    if isinstance(exc, OfflineModeIsEnabled):
        return PublishError(f"cannot {doing}: HF_HUB_OFFLINE is set; unset it on a connected machine "
                            f"(or use --dry-run to write the folder only)")
    if isinstance(exc, HfHubHTTPError):  # the Hub answered (an OSError too: test it before the network errors)
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            what = "no valid token" if status == 401 else f"no write access to '{repo_id}'"
            return PublishError(f"cannot {doing}: the Hub answered {status} ({what}); {LOGIN_HINT}")
        return PublishError(f"cannot {doing}: the Hub refused it ({said})")
    return PublishError(f"cannot {doing}: no connection to the Hub ({said}); check the network "
                        f"(or use --dry-run to write the folder only)")


def check_hub_access(api: HfApi, repo_id: str) -> str:
    """Fail in one line when offline or unauthorised; returns the account name the token belongs to."""
    if is_offline_mode():
        raise PublishError("cannot publish: HF_HUB_OFFLINE is set; unset it on a connected machine "
                           "(or use --dry-run to write the folder only)")
    if (api.token or get_token()) is None:
        raise PublishError(f"cannot publish to '{repo_id}': not logged in to the Hugging Face Hub; {LOGIN_HINT}")
    try:
        return str(api.whoami().get("name", "?"))
    except (HfHubHTTPError, *_network_errors()) as exc:
        raise _hub_failure(exc, repo_id, f"publish to '{repo_id}'") from None


def _check_out(out: Path, model: Path) -> None:
    out, model = Path(out).resolve(), Path(model).resolve()
    if out == model or out.is_relative_to(model) or model.is_relative_to(out):
        raise PublishError(f"--out {out}: must be outside the model folder {model} (and not contain it)")
    if out.is_file():
        raise PublishError(f"--out {out}: is a file; give a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / PUBLISH_RECORD).is_file():
        raise PublishError(f"--out {out}: exists and was not written by `publish` (no {PUBLISH_RECORD}); "
                           f"choose a new or empty folder")


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another disk, or a file system without hard links
        shutil.copy2(src, dst)


def _stage_model(resolved: ResolvedModel, stage: Path) -> None:
    """The export files into ``stage``: linked from an export folder, or exported from the checkpoint."""
    if resolved.loads_as == "export":
        stage.mkdir()
        for f in sorted(resolved.model_dir.iterdir()):
            # its README (local paths) is replaced by the card; the marker of who wrote the folder stays local
            if f.is_file() and f.name not in (CARD_FILE, OUTPUT_MARKER):
                _link_or_copy(f, stage / f.name)
        return
    export_from_checkpoint(resolved.model_dir, stage, base_for_checkpoint(resolved.model_dir, resolved.base_model))
    (stage / CARD_FILE).unlink(missing_ok=True)
    (stage / OUTPUT_MARKER).unlink(missing_ok=True)  # publish's own record (xtts_ft_publish.json) says who wrote it


def _public_name(path: Optional[str]) -> Optional[str]:
    """A local path as it may appear in public: the Hub id for XTTS-v2's cache, else its last two parts."""
    if not path:
        return path
    parts = Path(str(path)).parts
    return BASE_MODEL if "models--coqui--XTTS-v2" in parts else "/".join(parts[-2:])


def _without_local_paths(meta: JsonObject) -> JsonObject:
    """The export's metadata with this machine's paths (user and folder names) cut to names; nothing
    reads them from a downloaded copy (serve uses source_checkpoint only to find a run on this disk)."""
    out = {**meta, "source_checkpoint": _public_name(meta.get("source_checkpoint")),
           "base_model": _public_name(meta.get("base_model"))}
    if isinstance(meta.get("checkpoint_meta"), dict):
        out["checkpoint_meta"] = {**meta["checkpoint_meta"],
                                  "base_model": _public_name(meta["checkpoint_meta"].get("base_model"))}
    return out


def _stage_samples(facts: CardFacts, run_dir: Optional[Path], stage: Path) -> None:
    kept: list[JsonObject] = []
    for s in facts.samples:
        src = (run_dir / s["path"]) if run_dir is not None and not Path(s["path"]).is_absolute() else Path(s["path"])
        if not src.is_file():
            log.warning("publish: sample %s is gone from the run folder; the card goes without it", src)
            continue
        (stage / SAMPLES_SUBDIR).mkdir(exist_ok=True)
        name = f"{SAMPLES_SUBDIR}/{len(kept) + 1:02d}_{src.name}"
        _link_or_copy(src, stage / name)
        kept.append({**s, "file": name})
    facts.samples = kept


def write_publish_folder(model: Path, repo_id: str, out: Path, *, endpoint: str,
                         base_model: Optional[str] = None) -> tuple[Path, JsonObject]:
    """Build ``out``: the export, ``README.md`` (the card), ``samples/``, :data:`PUBLISH_RECORD`."""
    resolved = resolve_model(Path(model), base_model)  # the same reading of --model as `serve`
    _check_out(out, resolved.given)
    _check_out(out, resolved.model_dir)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = out.with_name(f".{out.name}.publish-{socket.gethostname()}-{os.getpid()}")
    shutil.rmtree(stage, ignore_errors=True)
    try:
        _stage_model(resolved, stage)
        export_meta = read_json(stage / EXPORT_META)
        facts = gather_facts(resolved, export_meta, repo_id)
        _stage_samples(facts, resolved.run_dir, stage)
        # a new file, not a write into the hard link: the export it came from keeps its own metadata
        atomic_write(stage / EXPORT_META, json.dumps(_without_local_paths(export_meta), indent=2, ensure_ascii=False))
        card = render_card(facts, endpoint)
        atomic_write(stage / CARD_FILE, str(card))
        # no local paths in the record: it is uploaded too
        record = {"xtts_ft_version": __version__, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                  "published_from": resolved.kind, **facts.to_json()}
        atomic_write(stage / PUBLISH_RECORD, json.dumps(record, indent=2, ensure_ascii=False, default=str) + "\n")
        replace_dir(stage, out)  # an earlier publish folder there is swapped out whole
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return out, record


def publish(model: Path, repo_id: str, *, out: Path, private: bool = False, dry_run: bool = False,
            endpoint: Optional[str] = None, token: Optional[str] = None,
            base_model: Optional[str] = None) -> PublishResult:
    """Write the folder; unless ``dry_run``, create the repo (``private``) and upload the folder to it."""
    check_repo_id(repo_id)
    api = HfApi(endpoint=endpoint, token=token)
    if not dry_run:
        user = check_hub_access(api, repo_id)
        log.info("publish: logged in to %s as %s", api.endpoint, user)
    folder, _ = write_publish_folder(model, repo_id, out, endpoint=api.endpoint, base_model=base_model)
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    if dry_run:
        return PublishResult(folder=folder, url=None, files=files)
    try:
        url = api.create_repo(repo_id, private=private, exist_ok=True)
        api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message=f"Publish with xtts-ft {__version__}")
    except (HfHubHTTPError, *_network_errors()) as exc:
        raise _hub_failure(exc, repo_id, f"upload to '{repo_id}'") from None
    return PublishResult(folder=folder, url=str(url), files=files)

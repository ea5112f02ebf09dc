"""Who owns a command's output folder, and the stage-then-swap every folder-writing command goes through.

``ingest --out``, ``prepare --out``, ``make-random-model --out`` and ``export --out`` write whole
folders outside the run directory. Each finished folder carries a marker (``layout.OUTPUT_MARKER``)
naming the command that wrote it, when, and the files it wrote. Before writing, a command looks at
its ``--out``:

- absent or empty: written;
- written by this same command and holding nothing else: rewritten (commands whose output can be
  made again from its inputs; ``ingest`` never, a dataset of recordings cannot);
- anything else: refused in one line naming the folder, what is in it and the options:
  ``--move-old-aside`` (the old folder becomes ``<name>.old-<date>`` beside it, nothing deleted) and,
  for ingest, ``--add-to-existing`` (the old folder's files are all kept, the new clips added).

:func:`staged_output` builds the new folder in a hidden sibling and swaps it in at the end with
:func:`xtts_ft.tempfiles.replace_dir`, so a stop or a crash leaves the old folder or the new one,
never a mix. A folder is only deleted by that swap when this command wrote it and its every file
is in the marker, or when every one of its files was carried into the new folder (add).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from xtts_ft.errors import UserError
from xtts_ft.json_types import JsonMapping, JsonObject
from xtts_ft.layout import OUTPUT_MARKER
from xtts_ft.tempfiles import atomic_write, replace_dir, temp_sibling

REFUSE = "refuse"
MOVE_ASIDE = "move-aside"
ADD = "add"
MOVE_ASIDE_OPTION = "--move-old-aside"
ADD_OPTION = "--add-to-existing"
MOVE_ASIDE_HELP = ("If --out already holds something this command may not write over (anything it did not write; "
                   "for ingest, anything), move that folder aside to <out>.old-<date> beside it (nothing is "
                   "deleted) and write a fresh one. Without it such a command is refused.")
ADD_HELP = ("If --out already holds a dataset (an earlier ingest, or any metadata.csv dataset), add the new "
            "clips to it: every old file and row is kept, new clip names follow the highest existing one.")


class OutputFolderError(UserError):
    """``--out`` holds something the command did not write, and no option says what to do with it."""


@dataclass(frozen=True)
class FolderState:
    kind: str  # absent | empty | ours | foreign
    what: str  # what is there, for the refusal ("model.pth, config.json and 3 more")


def read_marker(folder: Path) -> JsonObject:
    """The marker of ``folder`` ({} when there is none or it cannot be read)."""
    try:
        data = json.loads((Path(folder) / OUTPUT_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink())


def _describe(names: list[str]) -> str:
    shown = ", ".join(names[:3])
    return f"{shown} and {len(names) - 3} more" if len(names) > 3 else shown


def inspect_folder(folder: Path, command: str, legacy: str = "") -> FolderState:
    """What ``folder`` holds for ``command``; ``legacy`` names the file by which the command's output was known
    before markers existed (an export's xtts_ft_meta.json)."""
    folder = Path(folder)
    if not folder.exists():
        return FolderState("absent", "")
    if not folder.is_dir():
        return FolderState("foreign", "a file")
    names = [n for n in _files(folder) if n != OUTPUT_MARKER]
    if not names and not any(folder.iterdir()):
        return FolderState("empty", "")
    marker = read_marker(folder)
    if not marker and legacy and (folder / legacy).is_file():
        marker = {"command": command, "files": None, "written": "before output markers"}
    listed = set(marker.get("files") or [])
    unknown = [n for n in names if n not in listed]
    if marker.get("command") == command and (marker.get("files", []) is None or not unknown):
        return FolderState("ours", f"the output of an earlier {command} ({marker.get('written', '?')})")
    if marker.get("command") == command:
        return FolderState("foreign", f"the output of an earlier {command} plus {len(unknown)} file(s) it did not "
                                      f"write: {_describe(unknown)}")
    by = f"written by {marker['command']}" if marker.get("command") else "not written by this tool"
    return FolderState("foreign", f"{len(names)} file(s) {by}: {_describe(names or ['(empty folders)'])}")


def aside_name(folder: Path) -> Path:
    """``<name>.old-<date>`` beside ``folder``, with a counter when that is taken."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = folder.with_name(f"{folder.name}.old-{stamp}")
    n = 1
    while candidate.exists():
        n += 1
        candidate = folder.with_name(f"{folder.name}.old-{stamp}-{n}")
    return candidate


def check_output(folder: Path, command: str, on_existing: str = REFUSE, *, replace_own: bool = True,
                 legacy: str = "") -> FolderState:
    """Refuse (one line) unless ``folder`` may be written by ``command`` as ``on_existing`` says."""
    folder = Path(folder)
    state = inspect_folder(folder, command, legacy)
    if state.what == "a file":
        raise OutputFolderError(f"--out {folder}: is a file, not a folder; choose a folder for --out")
    if state.kind in ("absent", "empty") or on_existing in (MOVE_ASIDE, ADD):
        return state
    if state.kind == "ours" and replace_own:
        return state
    options = f"{MOVE_ASIDE_OPTION} to move it to {folder.name}.old-<date> and write a new one"
    if command == "ingest":
        options = f"{ADD_OPTION} to add the new clips to it, or " + options
    raise OutputFolderError(f"--out {folder}: holds {state.what}; choose another --out, or pass {options}")


def write_marker(folder: Path, command: str, extra: JsonMapping | None = None) -> None:
    folder = Path(folder)
    files = [n for n in _files(folder) if n != OUTPUT_MARKER]
    record = {"command": command, "written": time.strftime("%Y-%m-%dT%H:%M:%S"), "files": files, **(extra or {})}
    atomic_write(folder / OUTPUT_MARKER, json.dumps(record, indent=1, ensure_ascii=False) + "\n")


def _carry_over(old: Path, stage: Path) -> None:
    """Every file of ``old`` into ``stage`` (hard links where the file system allows, else copies)."""
    for name in _files(old):
        src, dst = old / name, stage / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, dst, follow_symlinks=False)
        except OSError:
            shutil.copy2(src, dst, follow_symlinks=False)


@dataclass
class Staged:
    """What :func:`staged_output` hands the command: the folder to write, and how the old one is treated."""

    path: Path  # write here
    final: Path
    state: FolderState
    on_existing: str
    moved_to: Path | None = None  # set after the swap when the old folder was moved aside


@contextmanager
def staged_output(folder: Path, command: str, on_existing: str = REFUSE, *, replace_own: bool = True,
                  marker_extra: JsonMapping | None = None, legacy: str = "") -> Iterator[Staged]:
    """Check ``folder``, let the command write a hidden sibling, then swap it in (see the module doc).

    With ``on_existing=ADD`` the sibling starts as a copy of the old folder (hard links), so the
    command appends to it. Any exception (a stop included) removes the sibling and leaves ``folder``
    as it was.
    """
    folder = Path(folder)
    state = check_output(folder, command, on_existing, replace_own=replace_own, legacy=legacy)
    folder.parent.mkdir(parents=True, exist_ok=True)
    stage = temp_sibling(folder.with_name(f".{folder.name}.staging"))
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir()
    staged = Staged(stage, folder, state, on_existing)
    try:
        if on_existing == ADD and state.kind in ("ours", "foreign"):
            _carry_over(folder, stage)
        yield staged
        write_marker(stage, command, marker_extra)
        if state.kind == "foreign" and on_existing != ADD or (state.kind == "ours" and on_existing == MOVE_ASIDE):
            staged.moved_to = aside_name(folder)
            os.replace(folder, staged.moved_to)
        replace_dir(stage, folder)  # the old folder is gone only if it was ours or fully carried over
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)


def claim_in_place(folder: Path, command: str, on_existing: str = REFUSE) -> Path | None:
    """For a command that updates its own folder in place (``prepare`` re-processes only what changed).

    Checked like :func:`staged_output`; with ``--move-old-aside`` a folder it does not own moves aside
    first (returned). The marker is written before the work, listing no files: the whole folder is the
    command's from then on, so a stopped run's partial output is its own to continue.
    """
    folder = Path(folder)
    state = check_output(folder, command, on_existing)
    moved = None
    if state.kind == "foreign" or (state.kind == "ours" and on_existing == MOVE_ASIDE):
        moved = aside_name(folder)
        os.replace(folder, moved)
    folder.mkdir(parents=True, exist_ok=True)
    if not read_marker(folder):
        atomic_write(folder / OUTPUT_MARKER, json.dumps(
            {"command": command, "written": time.strftime("%Y-%m-%dT%H:%M:%S"), "files": None}, indent=1) + "\n")
    return moved

"""Reading ``.pth`` / ``.pt`` files people download: tensors and plain data only, never code.

Every weights file the project reads (base model, DVAE, mel stats, speaker file, training state)
goes through :func:`load_weights`: ``torch.load(..., weights_only=True)``, so a pickle that asks to
import and call something (``os.system``, a class's ``__reduce__``) is refused before anything
runs. torch's own refusal is a paragraph that suggests retrying with ``weights_only=False``; the
user sees one line instead, naming the file and what to do.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import torch

from xtts_ft.errors import UserError

_GLOBAL = re.compile(r"GLOBAL (\S+)")
_DETAIL = re.compile(r"WeightsUnpickler error: ([^\n]+)")


def unpickling_message(path: Path, exc: pickle.UnpicklingError) -> str:
    """One line for torch's weights-only refusal: code it would have run, or a damaged / foreign file."""
    found = _GLOBAL.search(str(exc))
    if found:
        return (f"{path}: refused to load: it would import and call '{found.group(1)}'; files are read as plain "
                f"weights only, so nothing in it was run. Use the official file, or re-save the weights as a plain "
                f"state dict")
    detail = _DETAIL.search(str(exc))
    why = detail.group(1).strip() if detail else first_line(exc)
    return (f"{path}: refused to load: not a plain torch weights file ({why}); it is damaged or was written by "
            f"something else, and nothing in it was run. Use the official file, or re-save the weights with torch.save")


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def load_weights(path: Path, error: type[UserError]) -> object:
    """``torch.load(path, weights_only=True)`` on the CPU; any problem is one ``error`` line naming ``path``.
    What it gives is what the file holds (tensors, dicts and lists of them, numbers): the caller checks its shape."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise error(unpickling_message(path, exc)) from None
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise error(f"{path}: cannot be read ({first_line(exc)}); the file is truncated or corrupted") from None

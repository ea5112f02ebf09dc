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
from typing import Any

import torch

from xtts_ft.errors import UserError

_GLOBAL = re.compile(r"GLOBAL (\S+)")


def refusal_reason(exc: BaseException) -> str:
    """Why the weights-only unpickler refused a file, in a few words."""
    found = _GLOBAL.search(str(exc))
    if found:
        return f"it would import and call '{found.group(1)}'"
    return "it holds objects other than tensors and plain data (or is damaged)"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def load_weights(path: Path, error: type[UserError]) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU; any problem is one ``error`` line naming ``path``."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise error(
            f"{path}: refused to load: {refusal_reason(exc)}; files are read as plain weights only, so nothing in it "
            f"was run. Use the official file, or re-save the weights as a plain state dict"
        ) from None
    except FileNotFoundError:
        raise error(f"{path}: file not found") from None
    except (RuntimeError, EOFError, OSError, ValueError) as exc:
        raise error(f"{path}: cannot be read ({first_line(exc)}); the file is truncated or corrupted") from None

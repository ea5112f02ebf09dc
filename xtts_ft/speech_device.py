"""Where a model speaks: ``--device`` of ``serve``, ``synthesize`` and the web app (its Speak tab).

- ``auto`` (or nothing): CUDA when torch sees a GPU, else the CPU. On a Mac that is the CPU: Apple's GPU
  (MPS) is used only when asked for, because coqui's XTTS is reported to fail or hang there in places
  (conditioning convolutions with more than 65,536 output channels, idiap/coqui-ai-TTS #248; attention-mask
  inference, coqui-ai/TTS #3649 and #3758) and one user measured the CPU faster (idiap/coqui-ai-TTS #65).
- ``mps``: Apple's GPU, in fp32 (the engine's half-precision options are CUDA-only). Operators MPS lacks run
  on the CPU: the command line sets ``PYTORCH_ENABLE_MPS_FALLBACK=1`` before torch loads (torch reads it once,
  when it loads), unless it is set already (cli.py, ``mps_fallback``).
- ``cuda``, ``cuda:N``, ``cpu``: as given; ``cuda`` without a visible GPU is refused.

Training never runs on MPS: ``run.device: mps`` is refused when the config is read (config/schema.py).
"""

from __future__ import annotations

import logging
from typing import Optional, Protocol

import torch

from xtts_ft.errors import ConfigError

log = logging.getLogger(__name__)

CHOICES = "auto, cpu, cuda, cuda:N or mps"


class Backend(Protocol):
    """What is asked of ``torch.cuda``: is a device there."""

    def is_available(self) -> bool: ...


class BuiltBackend(Backend, Protocol):
    """What is asked of ``torch.backends.mps``: is a device there, and was this torch built with it."""

    def is_built(self) -> bool: ...


def speech_device(requested: Optional[str], *, cuda: Optional[Backend] = None,
                  mps: Optional[BuiltBackend] = None) -> str:
    """The device a model speaks on for ``--device requested`` (see the module doc). ``cuda`` and ``mps`` stand in
    for ``torch.cuda`` and ``torch.backends.mps`` (tests; this project has no Mac to run on)."""
    cuda = torch.cuda if cuda is None else cuda
    mps = torch.backends.mps if mps is None else mps
    name = (requested or "auto").strip().lower()
    if name == "auto":
        return "cuda" if cuda.is_available() else "cpu"
    if name == "cpu":
        return "cpu"
    if name == "cuda" or name.startswith("cuda:"):
        if not cuda.is_available():
            raise ConfigError(f"--device {requested}: no CUDA device is visible here; use --device cpu")
        return name
    if name == "mps":
        if not mps.is_available():
            why = ("this torch was built without it" if not mps.is_built() else
                   "it needs a Mac with Apple silicon and a recent macOS")
            raise ConfigError(f"--device mps: torch sees no Apple GPU here ({why}); use --device cpu")
        log.info("speaking on Apple's GPU (mps) in fp32; operators it lacks run on the CPU")
        return "mps"
    raise ConfigError(f"--device {requested}: choose one of {CHOICES}")

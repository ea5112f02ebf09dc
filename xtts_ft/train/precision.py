"""Mixed precision: one setting decides the autocast dtype and whether a loss scaler runs.

``precision.mode`` resolves to one :class:`PrecisionPolicy`:

- ``bf16``: autocast to bfloat16, no loss scaler (bf16 has fp32's exponent range);
- ``fp16``: autocast to float16 *and* a ``torch.amp.GradScaler`` (fp16 gradients underflow without it);
- ``fp32``: no autocast, no scaler.

``auto`` picks bf16 on a GPU that supports it, fp16 on older GPUs (T4, V100) and fp32 on CPU.
"Supports" means native bf16 math: compute capability 8.0 or newer (A100, A10G, L4, H100).
``torch.cuda.is_bf16_supported()`` is not used for this: in torch 2.8 it also answers True when
bf16 merely *runs* through emulation (a T4 or V100 creates bf16 tensors fine), which is slow and
lacks the tensor-core path, so a T4 would train in emulated bf16 instead of fp16 + GradScaler.
Only the ``torch.amp`` API is used. fp16 autocast and ``GradScaler("cpu")`` both work on CPU in
torch 2.8 (verified on the tiny model), so the fp16 path is tested without a GPU.

The scaler starts at ``precision.init_scale`` (1024, not torch's 65536, which overflows at once on
XTTS) and grows every ``growth_interval`` clean steps. When the scale collapses below
``precision.min_scale`` the run switches to :func:`fallback_policy` instead of skipping step after
step: see ``loop.py``.

TF32 (:func:`apply_tf32`, ``precision.tf32``): on compute capability 8.0+ the fp32 matmuls and
convolutions run on TF32 tensor cores (fp32's range, a 10-bit mantissa), which is what makes an
fp32 run (explicit ``precision.mode: fp32``) fast on an A100/H100; torch leaves it off for matmuls
by default. It is a process-wide switch, so it is set where the run's device is set up, never at
import. Under bf16 autocast it only touches the few ops autocast keeps in fp32.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from xtts_ft.config import PrecisionConfig
from xtts_ft.errors import ConfigError

log = logging.getLogger(__name__)

#: ``PrecisionPolicy.autocast``: the forward pass's context.
Autocast = Callable[[], AbstractContextManager[None]]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}


@dataclass(frozen=True)
class PrecisionPolicy:
    """The resolved precision of a run on one device type ('cuda' or 'cpu')."""

    name: str  # "bf16" | "fp16" | "fp32"
    device_type: str

    @property
    def dtype(self) -> Optional[torch.dtype]:
        return _DTYPES[self.name]

    @property
    def autocast_enabled(self) -> bool:
        return self.name != "fp32"

    @property
    def scaler_enabled(self) -> bool:
        return self.name == "fp16"

    def autocast(self) -> AbstractContextManager[None]:
        """The forward-pass context: autocast to ``dtype``, or a disabled autocast for fp32."""
        ctx: AbstractContextManager[None] = (torch.amp.autocast(self.device_type, dtype=self.dtype)
                                             if self.autocast_enabled else
                                             torch.amp.autocast(self.device_type, enabled=False))
        return ctx


NATIVE_BF16_CAPABILITY = (8, 0)  # Ampere: the first NVIDIA generation with bf16 tensor cores


def cuda_bf16_supported(device: torch.device) -> bool:
    """True when ``device`` is a GPU with native bf16 (compute capability >= 8.0; ROCm: torch's own answer)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    if torch.version.hip:  # AMD: capabilities are not NVIDIA's numbering; torch knows its archs
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    return tuple(torch.cuda.get_device_capability(device)) >= NATIVE_BF16_CAPABILITY


def describe_cuda(device: torch.device) -> str:
    """'Tesla T4 (compute capability 7.5)'."""
    major, minor = torch.cuda.get_device_capability(device)
    return f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor})"


def resolve_precision(mode: str, device: torch.device) -> PrecisionPolicy:
    """``precision.mode`` -> a policy for ``device``; an impossible explicit choice is a ConfigError."""
    if mode == "auto":
        if device.type != "cuda":
            return PrecisionPolicy("fp32", device.type)
        return PrecisionPolicy("bf16" if cuda_bf16_supported(device) else "fp16", "cuda")
    if mode not in _DTYPES:
        raise ConfigError(f"precision.mode: '{mode}' is not one of auto, bf16, fp16, fp32")
    if mode == "bf16" and device.type == "cuda" and not cuda_bf16_supported(device):
        raise ConfigError(f"precision.mode: bf16 needs compute capability 8.0 or newer, {describe_cuda(device)} has "
                          f"no native bf16; set precision.mode: fp16 (or auto, which picks fp16 + GradScaler here)")
    return PrecisionPolicy(mode, device.type)


def fallback_policy(current: PrecisionPolicy, device: torch.device) -> PrecisionPolicy:
    """The safer precision a run switches to when fp16 loss scaling collapses: bf16 if the GPU has it, else fp32."""
    if current.name == "fp16" and cuda_bf16_supported(device):
        return PrecisionPolicy("bf16", current.device_type)
    return PrecisionPolicy("fp32", current.device_type)


def make_scaler(policy: PrecisionPolicy, cfg: PrecisionConfig) -> torch.amp.GradScaler:
    """A GradScaler with the config's settings; disabled (a no-op) unless the policy is fp16."""
    return torch.amp.GradScaler(
        policy.device_type,
        init_scale=cfg.init_scale,
        growth_factor=2.0,
        backoff_factor=cfg.backoff_factor,
        growth_interval=cfg.growth_interval,
        enabled=policy.scaler_enabled,
    )


def scale_tensor(scaler: torch.amp.GradScaler, device: torch.device) -> torch.Tensor:
    """The current loss scale as a 0-d tensor on ``device``, read *without* a host sync.

    ``GradScaler.get_scale()`` calls ``.item()``; the step's single fetch (see ``stability.py``)
    reads the scale together with the losses and the gradient norm instead. ``_get_scale_async``
    is torch's own non-blocking accessor (present since torch 1.6, used by ``get_scale``).
    """
    if scaler.is_enabled():
        scale = scaler._get_scale_async()  # noqa: SLF001 - the non-syncing twin of get_scale()
        if scale is not None:
            return scale.detach().reshape(()).float()
        return torch.tensor(float(scaler.get_scale()), device=device)
    return torch.ones((), device=device)


TF32_CAPABILITY = (8, 0)  # Ampere: the first NVIDIA generation with TF32 tensor cores


def apply_tf32(enabled: bool, device: torch.device) -> bool:
    """Switch TF32 matmuls and convolutions on for a GPU of capability >= 8.0 when ``enabled`` (else off).

    Returns whether TF32 is on. The CPU (and an older GPU, where TF32 does not exist) is left as it is.
    """
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    capable = not torch.version.hip and tuple(torch.cuda.get_device_capability(device)) >= TF32_CAPABILITY
    if not capable:
        return False
    torch.backends.cuda.matmul.allow_tf32 = bool(enabled)
    torch.backends.cudnn.allow_tf32 = bool(enabled)
    if enabled:
        log.info("TF32 on for fp32 matmuls and convolutions (%s; precision.tf32: false turns it off)",
                 describe_cuda(device))
    else:
        log.info("TF32 off (precision.tf32: false): fp32 matmuls and convolutions in full fp32 on %s",
                 describe_cuda(device))
    return bool(enabled)

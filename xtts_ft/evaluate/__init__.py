"""Evaluate, report and export a fine-tuned XTTS.

- ``synthesis``: ``synthesize_samples`` (test sentences x voices -> WAVs + ``SampleResult`` checks)
- ``metrics``: silence ratio, seconds per character, ``mcd_dtw`` (librosa-only MCD with DTW)
- ``hook``: ``make_eval_hook`` -> ``eval_hook(step, model) -> dict[str, float]`` for the trainer
- ``report``: ``write_report(run_dir)`` -> a self-contained ``report.html``
- ``export``: ``export_model`` / ``export_from_checkpoint`` -> a folder stock coqui-tts loads
- ``infer``: ``synthesize_command`` (export or checkpoint folder -> one WAV)

Names are imported lazily, so ``write_report`` does not pull in torch or transformers.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "SampleResult": "synthesis",
    "synthesize_samples": "synthesis",
    "mcd_dtw": "metrics",
    "silence_ratio": "metrics",
    "evaluate_step": "hook",
    "make_eval_hook": "hook",
    "write_report": "report",
    "export_model": "export",
    "export_from_checkpoint": "export",
    "synthesize_command": "infer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

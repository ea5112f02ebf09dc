"""Evaluate, report and export a fine-tuned XTTS.

- ``synthesis``: ``synthesize_samples`` (test sentences x voices -> WAVs + ``SampleResult`` checks)
- ``metrics``: silence ratio, seconds per character, ``mcd_dtw`` (librosa-only MCD with DTW)
- ``hook``: ``make_eval_hook`` -> ``eval_hook(step, model) -> dict[str, float]`` for the trainer
- ``report``: ``write_report(run_dir)`` -> a self-contained ``report.html``
- ``export``: ``export_model`` / ``export_from_checkpoint`` -> a folder stock coqui-tts loads
- ``infer``: ``synthesize_command`` (export or checkpoint folder -> one WAV)

Loading a model, conditioning and the batched decoder live one layer down, in :mod:`xtts_ft.inference`, which the
speech server shares.
"""

from xtts_ft.evaluate.export import export_from_checkpoint, export_model
from xtts_ft.evaluate.hook import evaluate_step, make_eval_hook
from xtts_ft.evaluate.infer import synthesize_command
from xtts_ft.evaluate.metrics import mcd_dtw, silence_ratio
from xtts_ft.evaluate.report import write_report
from xtts_ft.evaluate.synthesis import SampleResult, synthesize_samples

__all__ = [
    "SampleResult",
    "evaluate_step",
    "export_from_checkpoint",
    "export_model",
    "make_eval_hook",
    "mcd_dtw",
    "silence_ratio",
    "synthesize_command",
    "synthesize_samples",
    "write_report",
]

"""Dataset preparation: read a dataset folder, check and convert every clip, split, report.

The integrator's entry points::

    prepare_dataset(cfg: DatasetConfig, out_dir, *, normalizer, allowed_chars=None,
                    progress=True) -> PrepareReport
    prepare_command(input_dir, out_dir, fmt="auto", *, normalizer, config=None, allowed_chars=None, progress=True,
                    **overrides) -> PrepareReport
    read_metadata(csv_path) -> list[dict[str, str]]   # {"audio_file" (absolute), "text", "speaker_name"}

``REASONS`` lists every rejection key in the order the checks run.
"""

from xtts_ft.data.metadata import read_metadata
from xtts_ft.data.prepare import prepare_command, prepare_dataset
from xtts_ft.data.reasons import REASONS
from xtts_ft.data.report import PrepareReport

__all__ = ["REASONS", "PrepareReport", "prepare_command", "prepare_dataset", "read_metadata"]

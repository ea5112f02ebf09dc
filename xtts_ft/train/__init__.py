"""Training stage: fine-tune the XTTS-v2 GPT on the prepared dataset (see ``loop.py`` for the loop)."""

from xtts_ft.train.loop import TrainResult, train

__all__ = ["TrainResult", "train"]

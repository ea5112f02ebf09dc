"""Training stage: fine-tune the XTTS-v2 GPT on the prepared dataset (see ``loop.py`` for the loop)."""

from xtts_ft.train.loop import TrainResult, train
from xtts_ft.train.session import TrainInputs

__all__ = ["TrainInputs", "TrainResult", "train"]

"""tests/train/scripts/run_small.py, with pauses a test can aim a SIGKILL at (reliability tests only).

Usage: python -m tests.reliability.scripts.chaos_train ARGS.json (the JSON of tests/train's ``script_args``). The package
knows nothing of this: the environment variables below are read here, and only here.

CHAOS_PAUSE=state  the first checkpoint save of this process writes half of training_state.pt into
                   its staging file, touches CHAOS_READY and sleeps: a kill lands mid-write.
CHAOS_PAUSE=prune  the first save completes (folder renamed into place), then the process touches
                   CHAOS_READY and sleeps before pruning old checkpoints.
"""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

import torch

from tests.train.scripts import run_small
from xtts_ft import checkpoint_store as ckpt


def _pause_forever() -> None:
    Path(os.environ["CHAOS_READY"]).touch()
    time.sleep(3600)  # the test kills the process here


def install_pause(mode: str) -> None:
    if mode == "state":

        def half_then_pause(state, f):
            buf = io.BytesIO()
            torch.save(state, buf)
            data = buf.getvalue()
            f.write(data[: len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
            _pause_forever()

        ckpt.write_state = half_then_pause
    elif mode == "prune":

        def pause_before_pruning(*args, **kwargs):
            _pause_forever()

        ckpt.CheckpointStore.apply_retention = pause_before_pruning
    elif mode:
        raise SystemExit(f"CHAOS_PAUSE={mode!r}: expected state or prune")


if __name__ == "__main__":
    install_pause(os.environ.get("CHAOS_PAUSE", ""))
    sys.exit(run_small.main())

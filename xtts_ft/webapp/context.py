"""What every tab of the app shares: where it was started and the run-process controllers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from xtts_ft.webapp.process import RunController


@dataclass
class AppContext:
    run_dir: Path  # the run folder the page opens on (--run)
    cwd: Path  # where relative paths in configs are read from, and where training processes start
    configs_dir: Path  # configs/ offered in the Train tab
    config: Optional[Path] = None  # a config named at launch (--config)
    speech_device: Optional[str] = None  # where the Speak tab's model runs (ui --device); None: CUDA if visible, else CPU
    # (fn, inputs, outputs) run at page load; each fn is given the run folder's text
    on_load: list[tuple[Callable[[str], object], object, object]] = field(default_factory=list)
    _controllers: dict[str, RunController] = field(default_factory=dict)

    def controller(self, run_dir: Path) -> RunController:
        """One controller per run folder, so a process this app started is reaped when it ends."""
        key = str(Path(run_dir).resolve())
        if key not in self._controllers:
            self._controllers[key] = RunController(Path(run_dir), cwd=self.cwd)
        return self._controllers[key]

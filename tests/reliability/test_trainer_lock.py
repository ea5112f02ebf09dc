"""Two trainers in one run folder, as real processes: the second is refused before it writes anything.

Seen before the lock: a run started from the web app and the same ``headless_train.py`` command from a
terminal trained side by side in one folder; events.jsonl interleaved both, each one's keep_last deleted
the other's checkpoints. Readers (export, the server's model lookup) keep working while a trainer holds
the folder, and a trainer killed with SIGKILL leaves no lock behind.
"""

from __future__ import annotations

import signal
import subprocess
import sys

from tests.fixtures.scripts import RUN_SMALL, script_command, script_env
from tests.reliability.relhelpers import REPO, small_config, wait_for
from xtts_ft.checkpoint_store import CheckpointStore
from xtts_ft.config import dump_config
from xtts_ft.evaluate.export import export_from_checkpoint
from xtts_ft.model_folder import is_export
from xtts_ft.run_lock import RunLock, lock_holder
from xtts_ft.serve.model_source import resolve_model


def test_a_second_trainer_is_refused_and_readers_work_while_the_first_trains(script_args, tiny_base, dataset,
                                                                           tmp_path):
    run = tmp_path / "run"
    args = script_args(run, sections={"training": {"max_steps": 100000},
                                      "checkpoint": {"every_steps": 2, "keep_last": 2}})
    log = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(script_command(RUN_SMALL, args), env=script_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: lock_holder(run) is not None, 300, "lock", first)
        assert lock_holder(run).pid == first.pid
        wait_for(lambda: CheckpointStore.of_run(run).latest() is not None, 300, "checkpoint", first)
        first.send_signal(signal.SIGSTOP)  # paused mid-run, lock held: its retention cannot delete what is read below

        config = tmp_path / "same_run.yaml"
        cfg = small_config(run, dataset={"path": str(dataset[0].parent)})
        dump_config(cfg, config)
        second = subprocess.run([sys.executable, str(REPO / "headless_train.py"), "--config", str(config)],
                                cwd=REPO, env=script_env(), capture_output=True, text=True, timeout=300)
        assert second.returncode == 2, second.stderr[-3000:]
        errors = [line for line in second.stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and "another trainer is using this run folder" in errors[0]
        assert f"pid {first.pid}," in errors[0] and f"from the command line: {sys.executable} -m {RUN_SMALL}" in errors[0]
        assert "Traceback" not in second.stderr
        # refused before writing anything: the pipeline's config.yaml and the command line's train.log never appear
        assert not (run / "config.yaml").exists() and not (run / "train.log").exists()

        # readers never take the lock: an export of the running trainer's checkpoint and the server's model lookup
        latest = CheckpointStore.of_run(run).latest()
        out = export_from_checkpoint(latest, tmp_path / "export", tiny_base)
        assert is_export(out)
        assert resolve_model(run).loads_as == "checkpoint"
        assert first.poll() is None and lock_holder(run).pid == first.pid  # still training, still the holder
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
        log.close()
    # killed with SIGKILL: nothing to release by hand, the next trainer takes the folder
    assert lock_holder(run) is None
    with RunLock(run) as lock:
        assert lock.acquired

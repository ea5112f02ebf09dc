"""Each machine of a job and the run folder it uses (xtts_ft/train/machine_folders.py), seen from one rank.

The collectives are stood in for by a ``MainFirst`` whose "other ranks" are given values (two real machines run
in tests/train/test_several_machines.py): here, what one rank decides, locks and writes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.fixtures.scripts import REPO_ROOT, script_env
from xtts_ft.config import load_config
from xtts_ft.errors import ConfigError, DataError, RunFolderError
from xtts_ft.input_hash import file_digest
from xtts_ft.layout import DVAE_FILE, EVAL_CSV, TRAIN_CSV, RunLayout
from xtts_ft.run_lock import RunLock
from xtts_ft.train.dvae_stage import DvaeStageResult
from xtts_ft.train.machine_folders import (
    MachineFolders,
    check_same_inputs,
    claim_machine_folders,
    dvae_for_every_machine,
    write_token,
)


class OneRankOfTwo:
    """``MainFirst`` as rank ``rank`` sees it: ``gather`` puts this rank's value among the others' given ones."""

    def __init__(self, rank: int, others: object = None, shared_payload: object = None) -> None:
        self.ctx = SimpleNamespace(rank=rank, local_rank=0, is_main=rank == 0, world_size=2, enabled=True)
        self.others, self.shared_payload = others, shared_payload

    def everywhere(self, what, fn):
        return fn()

    def run(self, what, fn):
        return fn()

    def gather(self, obj):
        return [obj if rank == self.ctx.rank else self.others for rank in range(2)]

    def share(self, what, fn):
        return fn() if self.ctx.is_main else self.shared_payload


def test_a_machine_that_reads_rank0s_token_shares_its_folder_and_takes_no_lock(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    token = write_token(run)  # rank 0, holding the lock
    lock = RunLock(run)
    folders = claim_machine_folders(OneRankOfTwo(1, others=True), run, token, lock)
    assert folders == MachineFolders((True, True)) and folders.all_shared
    assert not lock.acquired  # rank 0's lock covers the folder


def test_a_machine_with_a_folder_of_its_own_locks_it_before_writing_and_is_refused_when_a_trainer_holds_it(tmp_path):
    rank0, mine = tmp_path / "machine0" / "run", tmp_path / "machine1" / "run"
    rank0.mkdir(parents=True)
    token = write_token(rank0)
    lock = RunLock(mine)
    try:
        folders = claim_machine_folders(OneRankOfTwo(1, others=True), mine, token, lock)
        assert folders.shared == (True, False) and folders.own_folder_ranks() == [1]
        assert lock.acquired
    finally:
        lock.release()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from xtts_ft.run_lock import RunLock; "
                               "RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)", str(mine)],
                              cwd=REPO_ROOT, env=script_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderError, match=f"another trainer is using this run folder \\(pid {holder.pid}"):
            claim_machine_folders(OneRankOfTwo(1, others=True), mine, token, RunLock(mine))
    finally:
        holder.kill()
        holder.wait()


def prepared(folder: Path, clips: str) -> Path:
    folder.mkdir(parents=True)
    (folder / TRAIN_CSV).write_text(f"audio_file|text|speaker_name\n{clips}\n", encoding="utf-8")
    (folder / EVAL_CSV).write_text("audio_file|text|speaker_name\nwavs/e.wav|ሰላም|s\n", encoding="utf-8")
    return folder


def test_a_machine_that_prepared_other_data_stops_the_run_naming_it(tmp_path):
    data = prepared(tmp_path / "data", "wavs/a.wav|ሰላም|s")
    other = prepared(tmp_path / "other", "wavs/a.wav|ሰላም ለዓለም|s")
    rank0_view = ("fp1", file_digest(other / TRAIN_CSV), file_digest(other / EVAL_CSV))
    own = MachineFolders((True, False))
    with pytest.raises(DataError, match="datasets/x: the machine of rank 1 prepared other data than rank 0's \\(the "
                                        "prepared clips differ, in .*every machine must hold the same dataset"):
        check_same_inputs(OneRankOfTwo(1, others=rank0_view), own, data, "fp1", "datasets/x")
    with pytest.raises(DataError, match="rank 1 prepared other data than rank 0's \\(the vocabulary differ"):
        check_same_inputs(OneRankOfTwo(0, others=("fp2", *rank0_view[1:])), own, other, "fp1", "datasets/x")
    check_same_inputs(OneRankOfTwo(0, others=rank0_view), own, other, "fp1", "datasets/x")  # the same: nothing said
    check_same_inputs(OneRankOfTwo(0, others=None), MachineFolders((True, True)), other, "fp1", "x")  # shared: no check


def test_a_machine_with_its_own_folder_gets_rank0s_fine_tuned_dvae(tmp_path):
    weights = bytes(range(256)) * 3
    report = {"dvae_pth": "/machine0/run/dvae/dvae.pth", "eval_loss_before": 2.0, "eval_loss_after": 1.5,
              "steps": 10, "skipped_steps": 0}
    ran = []
    main_first = OneRankOfTwo(1, shared_payload=(report, torch.frombuffer(bytearray(weights), dtype=torch.uint8)))
    got = dvae_for_every_machine(main_first, MachineFolders((True, False)), tmp_path / "run",
                                 lambda: ran.append(1))  # type: ignore[arg-type, return-value]
    assert ran == []  # the stage never runs where rank 0's folder is not seen
    local = RunLayout(tmp_path / "run").dvae / DVAE_FILE
    assert got == DvaeStageResult(local, 2.0, 1.5, 10, 0)
    assert local.read_bytes() == weights


def test_a_named_checkpoint_is_checked_by_rank_0_whose_disk_holds_it(monkeypatch):
    given = "checkpoint.resume=/machine0/run/checkpoints/step_000002"
    monkeypatch.setenv("RANK", "1")  # another machine's rank: the path need not exist there
    assert load_config("configs/demo.yaml", [given])
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ConfigError, match=f"{given}: '/machine0/run/checkpoints/step_000002' is not auto"):
        load_config("configs/demo.yaml", [given])

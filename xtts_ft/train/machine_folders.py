"""Which machines of a torchrun job see rank 0's run folder, and each machine's claim on the folder it uses.

A job of several machines may keep ``run.output_dir`` on storage they all see (a network file system) or on
each machine's own disk (cloud machines often have only that). The pipeline asks once per command, right
after rank 0 has locked and claimed its folder: rank 0 writes a fresh random token there
(``layout.MACHINE_TOKEN``); a machine whose ranks read that token back shares rank 0's folder, any other uses
a folder of its own.

- Shared: rank 0's lock is the job's (one trainer per run folder; a second job on the same folder is refused
  by it, where the file system passes locks between machines).
- A folder of its own: the machine's local rank 0 takes the lock on it before anything is written there, so
  a single-machine trainer already using that folder refuses the job (its one line; every rank stops), and
  none can start there while the job runs. The machine prepares its own data, vocabulary and DVAE code cache
  (the stages run there as on rank 0); checkpoints are rank 0's alone and reach the other ranks through the
  process group when a run resumes (``MainFirst.share``). Every machine's prepared data and vocabulary must
  then be rank 0's (:func:`check_same_inputs`): a dataset that differs between machines would train each
  rank on other clips, with token ids that mean other things. The fine-tuned DVAE (``dvae.finetune``) is
  the one exception to "each machine makes its own": its stage runs in one process only, so rank 0's
  ``dvae.pth`` is sent to the other machines (:func:`dvae_for_every_machine`) and their code caches are
  made with the very weights rank 0's is.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch

from xtts_ft.errors import DataError
from xtts_ft.input_hash import file_digest
from xtts_ft.json_types import JsonObject
from xtts_ft.layout import DVAE_FILE, EVAL_CSV, TRAIN_CSV, RunLayout
from xtts_ft.run_lock import RunLock
from xtts_ft.tempfiles import atomic_write
from xtts_ft.train.distributed import MainFirst
from xtts_ft.train.dvae_stage import DvaeStageResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MachineFolders:
    """Per rank: whether it sees rank 0's run folder (False: a folder of its machine's own)."""

    shared: tuple[bool, ...]

    @property
    def all_shared(self) -> bool:
        return all(self.shared)

    def own_folder_ranks(self) -> list[int]:
        return [rank for rank, shared in enumerate(self.shared) if not shared]


def write_token(run_dir: Path) -> str:
    """Rank 0, holding the run folder's lock: a new token for this command, written into the folder."""
    token = secrets.token_hex(16)
    atomic_write(RunLayout(run_dir).machine_token, token + "\n")
    return token


def sees_token(run_dir: Path, token: str) -> bool:
    path: Path = RunLayout(run_dir).machine_token
    try:
        return path.read_text(encoding="utf-8").strip() == token
    except (OSError, UnicodeDecodeError):
        return False


def claim_machine_folders(main_first: MainFirst, run_dir: Path, token: str, lock: RunLock) -> MachineFolders:
    """Every rank: whether it sees rank 0's folder; on a machine that does not, its local rank 0 locks the folder
    this machine uses (a refusal stops every rank with its line). Rank 0 holds ``lock`` already."""
    ctx = main_first.ctx

    def here() -> bool:
        shared = ctx.is_main or sees_token(run_dir, token)
        if not shared and ctx.local_rank == 0:
            lock.acquire()  # before this machine writes anything into its folder
        return shared

    shared = tuple(main_first.gather(main_first.everywhere("the run folder of each machine", here)))
    folders = MachineFolders(shared)
    if ctx.is_main and not folders.all_shared:
        log.info("run folder: rank(s) %s do not see rank 0's %s: their machines keep a folder of their own (each "
                 "prepares its own data, vocabulary and code cache; checkpoints are written here only, and a resume "
                 "sends their state to every rank)", ", ".join(map(str, folders.own_folder_ranks())), run_dir)
    return folders


def check_same_inputs(main_first: MainFirst, folders: MachineFolders, data_dir: Path, vocab_fingerprint: str,
                      dataset: str) -> None:
    """On every rank: stop when a machine with a folder of its own prepared other data or another vocabulary
    than rank 0 (nothing to compare when every machine shares rank 0's folder)."""
    if folders.all_shared:
        return
    mine = (vocab_fingerprint, file_digest(data_dir / TRAIN_CSV), file_digest(data_dir / EVAL_CSV))
    theirs = main_first.gather(mine)
    differ = [rank for rank, value in enumerate(theirs) if value != theirs[0]]
    if differ:
        what = "the vocabulary" if theirs[differ[0]][0] != theirs[0][0] else "the prepared clips"
        raise DataError(
            f"{dataset}: the machine of rank {differ[0]} prepared other data than rank 0's ({what} differ, in "
            f"{data_dir}): every machine must hold the same dataset at this path; copy it there, or keep "
            f"run.output_dir (and the dataset) on storage every machine sees")


def dvae_for_every_machine(main_first: MainFirst, folders: MachineFolders, run_dir: Path,
                           stage: Callable[[], Optional[DvaeStageResult]]) -> Optional[DvaeStageResult]:
    """The DVAE stage on the machines that see rank 0's folder (``stage``, as ``MainFirst.run``); rank 0's
    ``dvae.pth`` written into the folder of every other machine, whose ranks then use that copy."""
    shared = folders.shared[main_first.ctx.rank]
    result = main_first.run("dvae", lambda: stage() if shared else None)

    def rank0_weights() -> Optional[tuple[JsonObject, torch.Tensor]]:
        if result is None:
            return None
        return result.to_dict(), torch.frombuffer(bytearray(result.dvae_pth.read_bytes()), dtype=torch.uint8)

    sent = main_first.share("the fine-tuned DVAE", rank0_weights)
    if sent is None or shared:
        return result
    report, weights = sent
    local = RunLayout(run_dir).dvae / DVAE_FILE

    def write() -> None:
        if main_first.ctx.local_rank == 0:  # one writer per machine; the others wait in everywhere()
            local.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(local, weights.numpy().tobytes())

    main_first.everywhere("the fine-tuned DVAE", write)
    return DvaeStageResult(dvae_pth=local, eval_loss_before=report["eval_loss_before"],
                           eval_loss_after=report["eval_loss_after"], steps=report["steps"],
                           skipped_steps=report["skipped_steps"])

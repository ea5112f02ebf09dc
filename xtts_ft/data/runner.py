"""Run the audio stage over many clips: in this process, or across worker processes.

Jobs are submitted a few per worker at a time (not all at once), so memory stays bounded by
the clips in flight whatever the dataset size. Workers are started with the ``spawn`` method:
nothing of the caller's state (threads, CUDA, open files) is inherited.

A stop request (``xtts_ft.stop_signals``) is checked after every finished clip: the clips in
flight finish (their results are kept by the caller's manifest), nothing new starts, and
:class:`StopRequested` says "prepare" to the command. Workers ignore SIGINT/SIGTERM themselves
(a Ctrl-C reaches the whole process group), so they print no KeyboardInterrupt tracebacks.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Callable

from tqdm import tqdm

from xtts_ft.data.audio import AudioJob, AudioResult, process_audio
from xtts_ft.stop_signals import held_while_starting_workers, ignore_stop_signals, raise_if_stopped

log = logging.getLogger(__name__)

IN_FLIGHT_PER_WORKER = 4


def worker_count(requested: int, jobs: int) -> int:
    """requested 0 = every core available to this process; never more than there are jobs."""
    if requested <= 0:
        try:
            requested = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            requested = os.cpu_count() or 1
    return max(1, min(requested, jobs))


def run_jobs(
    jobs: list[AudioJob], workers: int, on_result: Callable[[AudioResult], None], progress: bool = True
) -> None:
    """Process every job, calling ``on_result`` (in this process) as each one finishes."""
    if not jobs:
        return
    workers = worker_count(workers, len(jobs))
    log.info("processing audio of %d clip(s) with %d worker(s)", len(jobs), workers)
    with tqdm(total=len(jobs), desc="prepare audio", unit="clip", disable=not progress) as bar:
        if workers == 1:
            for job in jobs:
                on_result(process_audio(job))
                bar.update()
                raise_if_stopped("prepare")
            return
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=ignore_stop_signals)
        try:
            todo = iter(jobs)
            pending: set[Future[AudioResult]] = set()
            with held_while_starting_workers():  # the first submits start the workers
                for job in todo:
                    pending.add(pool.submit(process_audio, job))
                    if len(pending) >= workers * IN_FLIGHT_PER_WORKER:
                        break
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    on_result(future.result())
                    bar.update()
                for _ in done:
                    raise_if_stopped("prepare")  # after every finished result is stored: none is lost
                    following = next(todo, None)
                    if following is not None:
                        pending.add(pool.submit(process_audio, following))
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

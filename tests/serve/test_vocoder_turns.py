"""The vocoder's turns: one call at a time, the earliest deadline first, nobody left waiting."""

from __future__ import annotations

import threading
import time

import pytest

from xtts_ft.serve.vocoder_turns import VocoderTurns


def _queue_behind_a_running_call(turns: VocoderTurns, deadlines: list[float]) -> list[float]:
    ran: list[float] = []
    holding, release = threading.Event(), threading.Event()

    def first() -> None:
        with turns.turn(0.0):
            holding.set()
            assert release.wait(10)

    def call(deadline: float) -> None:
        with turns.turn(deadline):
            ran.append(deadline)

    runner = threading.Thread(target=first)
    runner.start()
    assert holding.wait(10)
    callers = []
    for d in deadlines:  # each queued while the first call runs, in this arrival order
        callers.append(threading.Thread(target=call, args=(d,)))
        callers[-1].start()
        for _ in range(1000):
            if turns.waiting == len(callers):
                break
            time.sleep(0.001)
    assert turns.waiting == len(deadlines)
    release.set()
    for t in [runner, *callers]:
        t.join(10)
    return ran


def test_waiting_calls_run_earliest_deadline_first_and_ties_in_arrival_order():
    turns = VocoderTurns()
    assert _queue_behind_a_running_call(turns, [5.0, 1.0, 3.0, 1.0, 2.0]) == [1.0, 1.0, 2.0, 3.0, 5.0]
    assert turns.order == [0.0, 1.0, 1.0, 2.0, 3.0, 5.0] and turns.waiting == 0


def test_one_call_at_a_time():
    turns = VocoderTurns()
    inside, most = [0], [0]
    lock = threading.Lock()

    def call(i: int) -> None:
        with turns.turn(float(i % 3)):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.002)
            with lock:
                inside[0] -= 1

    pool = [threading.Thread(target=call, args=(i,)) for i in range(12)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(10)
    assert most[0] == 1 and len(turns.order) == 12


def test_a_call_that_fails_or_is_interrupted_does_not_block_the_others():
    turns = VocoderTurns()
    with pytest.raises(RuntimeError):
        with turns.turn(1.0):
            raise RuntimeError("vocoder failed")
    with turns.turn(2.0):  # the turn was given back
        pass
    assert turns.order == [1.0, 2.0] and turns.waiting == 0

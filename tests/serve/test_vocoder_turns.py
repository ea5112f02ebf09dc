"""The vocoder's turns: one call at a time, the earliest deadline first, nobody left waiting; items gathered into one
call when they fit."""

from __future__ import annotations

import threading
import time

import pytest

from xtts_ft.serve.vocoder_turns import VocoderTurns


def _behind_a_running_call(turns: VocoderTurns, calls: list, while_held=None) -> None:
    """Start each of ``calls`` in its own thread, in this order, each once the previous one waits, while a plain
    turn runs; then (after ``while_held(running)``, the running turn's thread, if given) end that turn and wait for
    them all."""
    holding, release = threading.Event(), threading.Event()

    def first() -> None:
        with turns.turn(0.0):
            holding.set()
            assert release.wait(10)

    runner = threading.Thread(target=first)
    runner.start()
    assert holding.wait(10)
    callers = []
    for call in calls:
        callers.append(threading.Thread(target=call))
        callers[-1].start()
        for _ in range(1000):
            if turns.waiting == len(callers):
                break
            time.sleep(0.001)
    assert turns.waiting == len(calls)
    if while_held is not None:
        while_held(runner)
    release.set()
    for t in [runner, *callers]:
        t.join(10)


def _queue_behind_a_running_call(turns: VocoderTurns, deadlines: list[float]) -> list[float]:
    ran: list[float] = []

    def call(deadline: float) -> None:
        with turns.turn(deadline):
            ran.append(deadline)

    _behind_a_running_call(turns, [lambda d=d: call(d) for d in deadlines])
    return ran


def test_waiting_calls_run_earliest_deadline_first_and_ties_in_arrival_order():
    turns = VocoderTurns()
    assert _queue_behind_a_running_call(turns, [5.0, 1.0, 3.0, 1.0, 2.0]) == [1.0, 1.0, 2.0, 3.0, 5.0]
    assert turns.order == [0.0, 1.0, 1.0, 2.0, 3.0, 5.0] and turns.waiting == 0


def test_a_turns_end_wakes_only_the_caller_whose_turn_is_next():
    """Six callers queued behind a running call: each is woken once, when its turn comes (with every waiting caller
    woken at each turn's end, as a shared condition did, this run counts 12 or more)."""
    turns = VocoderTurns()
    assert _queue_behind_a_running_call(turns, [6.0, 5.0, 4.0, 3.0, 2.0, 1.0]) == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert turns.wakeups == 6


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


def _gathered_behind_a_running_call(turns: VocoderTurns, items: list[tuple[float, int]]) -> dict[int, object]:
    """``items`` (deadline, value) each vocoded by its own caller while a plain turn runs; each caller's result."""
    results: dict[int, object] = {}

    def call(deadline: float, value: int) -> None:
        try:
            results[value] = turns.vocode(deadline, value)
        except ValueError as exc:
            results[value] = exc

    _behind_a_running_call(turns, [lambda d=d, v=v: call(d, v) for d, v in items])
    return results


def test_the_call_whose_turn_it_is_takes_waiting_items_that_fit_and_hands_each_its_result():
    runs: list[list[int]] = []

    def run(values: list[int]) -> list[int]:
        runs.append(list(values))
        return [10 * v for v in values]

    turns: VocoderTurns[int, int] = VocoderTurns(3, run=run, fits=lambda a, b: a % 2 == b % 2)  # odd with odd
    results = _gathered_behind_a_running_call(turns, [(5.0, 1), (1.0, 3), (2.0, 2), (3.0, 5), (4.0, 7), (6.0, 4)])
    assert results == {1: 10, 3: 30, 2: 20, 5: 50, 7: 70, 4: 40}
    # 3 (deadline 1) leads and takes the earliest two odd ones that wait (5, 7), never more than 3 in a call;
    # then 2 (deadline 2) with 4; then 1 alone
    assert runs == [[3, 5, 7], [2, 4], [1]]
    assert turns.batches == [3, 2, 1] and turns.waiting == 0 and (turns.calls, turns.largest) == (3, 3)
    assert turns.order == [0.0, 1.0, 3.0, 4.0, 2.0, 6.0, 5.0]


def test_a_failed_call_fails_every_item_it_carried_and_no_other():
    def run(values: list[int]) -> list[int]:
        if 3 in values:
            raise ValueError("vocoder failed")
        return values

    turns: VocoderTurns[int, int] = VocoderTurns(2, run=run)
    results = _gathered_behind_a_running_call(turns, [(1.0, 3), (2.0, 1), (3.0, 2)])
    assert isinstance(results[3], ValueError) and isinstance(results[1], ValueError)  # one call: 3 and 1
    assert results[2] == 2 and turns.batches == [2, 1] and turns.waiting == 0


def test_with_a_batch_of_one_every_item_runs_in_its_own_call():
    turns: VocoderTurns[int, int] = VocoderTurns(1, run=lambda values: [v + 1 for v in values])
    results = _gathered_behind_a_running_call(turns, [(2.0, 1), (1.0, 2), (3.0, 3)])
    assert results == {1: 2, 2: 3, 3: 4} and turns.batches == [1, 1, 1]
    assert turns.order == [0.0, 1.0, 2.0, 3.0]


class _Gone(Exception):
    """What the test's callers raise when they are told to give their places up."""


def test_callers_told_to_give_up_leave_the_queue_at_once_and_the_rest_keep_their_order():
    """A stop (or a hang-up) while callers wait behind a long call: each one whose ``abandon`` raises leaves within a
    poll, without waiting for its turn (a stop used to end one caller per vocoder call), and the calls behind them
    still run, in deadline order."""
    turns: VocoderTurns[int, int] = VocoderTurns(1, run=lambda values: values)
    stop = threading.Event()
    left: list[int] = []
    ran: list[int] = []

    def abandon() -> None:
        if stop.is_set():
            raise _Gone()

    def leaving(value: int) -> None:
        try:
            turns.vocode(float(value), value, abandon=abandon)
        except _Gone:
            left.append(value)

    def staying(value: int) -> None:
        ran.append(turns.vocode(float(value), value))

    def stop_them(running: threading.Thread) -> None:
        stop.set()
        deadline = time.monotonic() + 10
        while len(left) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert running.is_alive() and turns.waiting == 2  # they left while the long call still ran

    calls = [lambda v=v: leaving(v) for v in (1, 2, 4)] + [lambda v=v: staying(v) for v in (5, 3)]
    _behind_a_running_call(turns, calls, while_held=stop_them)
    assert sorted(left) == [1, 2, 4] and ran == [3, 5] and turns.waiting == 0 and turns.order == [0.0, 3.0, 5.0]

"""The failure board of a torchrun job (xtts_ft/peers.py), on a real TCPStore in this process (torchrun's agent
hosts the same kind of store): the first failure stands, every other rank ends with its line, a rank that failed
before the process group started (a config mistake on its machine) still stops the others."""

from __future__ import annotations

import datetime
import threading
import time

import pytest
import torch.distributed as dist

from xtts_ft import cli, peers
from xtts_ft.errors import DataError
from xtts_ft.peers import Notice, PeerBoard, PeerFailed, PeerWatch


@pytest.fixture
def store():
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=10))
    yield server


def board(store, rank: int, world: int = 2) -> PeerBoard:
    return PeerBoard.connect("127.0.0.1", store.port, rank, world, timeout_s=5)


class Ended:
    """Stands in for ending the process: records the line a watch would print before exiting."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.called = threading.Event()

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        self.called.set()


def test_the_first_failure_stands_and_its_poster_learns_the_others_read_it(store):
    one, zero = board(store, 1), board(store, 0)
    assert zero.notice() is None
    assert one.post("dataset.path: folder '/x'\n does not exist") == Notice(1, "dataset.path: folder '/x' does not exist")
    assert zero.post("a later failure") == Notice(1, "dataset.path: folder '/x' does not exist")  # the first stands
    assert not one.wait_for_acks(0.2)
    zero.acknowledge()
    assert one.wait_for_acks(0.2)


def test_a_watch_ends_its_rank_with_the_line_of_the_rank_that_failed(store):
    ended = Ended()
    watch = PeerWatch(board(store, 0), poll_s=0.05, end=ended).start()
    try:
        board(store, 1).post("configs/demo.yaml: dataset.path: folder '/x' does not exist")
        assert ended.called.wait(5)
        assert ended.lines == ["stopped: rank 1 failed: configs/demo.yaml: dataset.path: folder '/x' does not exist"]
        assert board(store, 1).wait_for_acks(1)  # it said it read the line before ending
    finally:
        watch.close()


def test_a_closed_watch_never_ends_its_rank(store):
    ended = Ended()
    watch = PeerWatch(board(store, 0), poll_s=0.05, end=ended).start()
    watch.close()  # the run ended (or failed by itself) first
    board(store, 1).post("too late")
    time.sleep(0.3)
    assert ended.lines == []


def test_a_watch_whose_store_stays_unreachable_gives_up_after_the_grace_time():
    class Gone:
        rank = 1

        def notice(self):
            raise dist.DistNetworkError("Failed to recv, got 0 bytes")

    ended = Ended()
    watch = PeerWatch(Gone(), poll_s=0.05, lost_grace_s=0.3, end=ended).start()  # type: ignore[arg-type]
    try:
        assert ended.called.wait(5)
        assert ended.lines[0].startswith("stopped: lost contact with the main machine's store")
    finally:
        watch.close()


def test_a_collective_broken_by_a_peer_becomes_that_peers_line(store, monkeypatch):
    monkeypatch.setattr(peers, "ACK_WAIT_S", 0.2)
    board(store, 1).post("a.yaml: dataset.path: folder '/x' does not exist")
    instead = PeerWatch(board(store, 0)).failed(
        RuntimeError("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:544] Connection closed by peer"))
    assert isinstance(instead, PeerFailed)
    assert str(instead) == "stopped: rank 1 failed: a.yaml: dataset.path: folder '/x' does not exist"


def test_a_peer_gone_without_a_word_is_lost_contact_in_one_line(store, monkeypatch):
    monkeypatch.setattr(peers, "ACK_WAIT_S", 0.2)
    instead = PeerWatch(board(store, 0)).failed(RuntimeError("[gloo] Connection closed by peer [127.0.0.1]:1"))
    assert isinstance(instead, PeerFailed) and str(instead).startswith("stopped: lost contact with another rank (")


def test_a_ranks_own_mistake_is_posted_and_still_raised_as_itself(store, monkeypatch):
    monkeypatch.setattr(peers, "ACK_WAIT_S", 0.2)
    assert PeerWatch(board(store, 1)).failed(DataError("data/metadata_train.csv: no usable training clip")) is None
    assert board(store, 0).notice() == Notice(1, "data/metadata_train.csv: no usable training clip")
    # a bug keeps its traceback on its rank; the others get its type and message
    assert PeerWatch(board(store, 0)).failed(ValueError("boom")) is None  # posted second: the first stands
    assert board(store, 0).notice() == Notice(1, "data/metadata_train.csv: no usable training clip")


def test_a_config_mistake_before_the_group_starts_reaches_the_other_ranks(store, monkeypatch, capsys):
    """What torchrun's worker env holds; the config is wrong on this machine only (its dataset is missing)."""
    monkeypatch.setattr(peers, "ACK_WAIT_S", 0.2)
    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "0", "TORCHELASTIC_USE_AGENT_STORE": "True",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port)}.items():
        monkeypatch.setenv(name, value)
    code = cli.main(["train", "--config", "configs/demo.yaml", "--set", "dataset.path=/no/such/dataset"])
    assert code == 2
    line = "--set dataset.path=/no/such/dataset: folder '/no/such/dataset' does not exist"  # named where it was given
    assert capsys.readouterr().err.strip() == f"error: {line}"
    assert board(store, 0).notice() == Notice(1, line)


def test_outside_torchrun_there_is_no_board():
    assert PeerBoard.from_env({}) is None
    assert PeerBoard.from_env({"WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}) is None  # no agent store


def test_two_ranks_refused_before_the_group_starts_end_at_once_instead_of_waiting_for_each_other(store):
    """Both ranks of a torchrun job meet the same held lock: the second reads the first's line, so neither waits."""
    env = {"TORCHELASTIC_USE_AGENT_STORE": "True", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(store.port)}
    first = threading.Thread(target=peers.post_failure, args=("the run folder is held", {**env, "RANK": "0"}))
    started = time.monotonic()
    first.start()
    while board(store, 1).notice() is None:  # rank 0's line is posted; it now waits for rank 1's read
        time.sleep(0.02)
    peers.post_failure("the run folder is held", {**env, "RANK": "1"})
    first.join(peers.ACK_WAIT_S + 1)
    assert not first.is_alive() and time.monotonic() - started < peers.ACK_WAIT_S / 2

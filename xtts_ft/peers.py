"""When one rank of a torchrun job fails, every other rank stops within seconds, with one line each.

torchrun's agent starts a TCPStore at ``MASTER_ADDR:MASTER_PORT`` before any worker (torch 2.8 shares the
agent's store with the workers for both rendezvous backends: ``TORCHELASTIC_USE_AGENT_STORE=True``). That
store is the run's notice board (:class:`PeerBoard`): a rank that fails posts one line there (the first
post wins), and every rank watches it from a thread (:class:`PeerWatch`), from before the process group
starts to the end of the run. So a rank whose config is wrong on its machine stops the others while they
still wait in ``init_process_group``, and a rank stuck in an NCCL collective whose peer has gone (NCCL does
not notice for up to the collective timeout) ends as soon as the peer's line is posted.

What a rank prints:

- the rank that failed: its own ``error: ...`` line (the command line prints it, as on one machine); a bug
  keeps its traceback there;
- every other rank: ``error: stopped: rank N failed: <that line>`` and exit 1, instead of the gloo
  ``Connection closed by peer`` (or NCCL) traceback its next collective would raise. A rank whose peer
  vanished without posting (killed, out of memory) says it lost contact, once the store has been
  unreachable for ``LOST_GRACE_S`` or a collective failed.

The poster waits up to ``ACK_WAIT_S`` for the others to read its line before it exits: the store lives in
the agent of machine 0, which ends soon after that machine's workers do.

Outside torchrun (one process, or ranks started by hand without the agent's store) there is no board and
nothing here runs.
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import torch.distributed as dist

from xtts_ft.errors import UserError

log = logging.getLogger(__name__)

PREFIX = "xtts_ft/peers/"
FAILURE_KEY = "failure"
ACK_KEY = "acks"
POLL_S = 0.5  # how often a rank looks at the board
ACK_WAIT_S = 5.0  # how long a failed rank waits for the others to read its line
LOST_GRACE_S = 30.0  # how long the store may be unreachable before a rank that is still running gives up
CONNECT_S = 30.0  # the agent's store is up before any worker starts: this only bounds a broken network


class PeerFailed(UserError):
    """Another rank failed (its own line says why) and this one stopped with it."""


@dataclass(frozen=True)
class Notice:
    """The first failure posted on the board: which rank, and its one line."""

    rank: int
    line: str

    def encode(self) -> bytes:
        return f"{self.rank}\t{self.line}".encode()

    @classmethod
    def decode(cls, raw: bytes) -> Notice:
        rank, _, line = raw.decode("utf-8", errors="replace").partition("\t")
        return cls(int(rank) if rank.isdigit() else -1, line)

    def stopped_line(self) -> str:
        """What every other rank prints."""
        return f"stopped: rank {self.rank} failed: {self.line}"


def first_line(exc: BaseException) -> str:
    """An exception as one line: a user error's message, anything else with its type."""
    text = str(exc).strip().splitlines()
    if isinstance(exc, UserError):
        return text[0] if text else type(exc).__name__
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def is_lost_peer(exc: BaseException) -> bool:
    """A collective that failed because another process of the group went away (gloo raises a plain RuntimeError
    naming its transport; NCCL and the stores raise ``torch.distributed.DistError``)."""
    if isinstance(exc, dist.DistError):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        mark in text for mark in ("gloo", "Connection closed by peer", "Connection reset by peer", "NCCL"))


class PeerBoard:
    """The run's failure notice board: a prefix of torchrun's store. ``post`` keeps the first failure only."""

    def __init__(self, store: dist.Store, rank: int, world_size: int) -> None:
        self.store = dist.PrefixStore(PREFIX, store)
        self.rank, self.world_size = rank, world_size

    @classmethod
    def connect(cls, host: str, port: int, rank: int, world_size: int, timeout_s: float = CONNECT_S) -> PeerBoard:
        store = dist.TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s))
        return cls(store, rank, world_size)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Optional[PeerBoard]:
        """The board of the torchrun job this process is a worker of; None outside torchrun."""
        if environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or int(environ.get("WORLD_SIZE", "1") or 1) < 2:
            return None
        host, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT", "")
        if not host or not port.isdigit():
            return None
        try:
            return cls.connect(host, int(port), int(environ.get("RANK", "0")), int(environ["WORLD_SIZE"]))
        except dist.DistError as exc:  # the agent's store is unreachable: joining the group will say so itself
            log.warning("no failure board for this run (%s): a rank that fails may leave the others waiting", exc)
            return None

    def notice(self) -> Optional[Notice]:
        if not self.store.check([FAILURE_KEY]):
            return None
        return Notice.decode(self.store.get(FAILURE_KEY))

    def post(self, line: str) -> Notice:
        """Post this rank's failure unless another came first; the notice that stands."""
        mine = Notice(self.rank, " ".join(line.split()))
        return Notice.decode(self.store.compare_set(FAILURE_KEY, "", mine.encode()))

    def acknowledge(self) -> None:
        self.store.add(ACK_KEY, 1)

    def wait_for_acks(self, timeout_s: Optional[float] = None) -> bool:
        """Whether every other rank read the notice within ``timeout_s`` (default ``ACK_WAIT_S``)."""
        end = time.monotonic() + (ACK_WAIT_S if timeout_s is None else timeout_s)
        while self.store.add(ACK_KEY, 0) < self.world_size - 1:
            if time.monotonic() > end:
                return False
            time.sleep(0.1)
        return True


def end_process(line: str) -> None:
    """Print ``error: LINE`` and end this process at once (from the watch thread: the main thread may be blocked
    inside a collective that would never return)."""
    print(f"error: {line}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(1)


class PeerWatch:
    """A thread that ends this rank when another rank posts a failure, or when the board stays unreachable.

    ``close()`` stops it for good: the command's own end (a clean one, or its own failure) is never cut short by
    it. ``failed(exc)`` is what the pipeline calls with the exception that is ending this rank.
    """

    def __init__(self, board: PeerBoard, *, poll_s: float = POLL_S, lost_grace_s: float = LOST_GRACE_S,
                 end: Callable[[str], None] = end_process) -> None:
        self.board, self.poll_s, self.lost_grace_s, self._end = board, poll_s, lost_grace_s, end
        self._closed = threading.Event()
        self._ending = threading.Lock()  # the thread's end and close() never interleave
        self._thread = threading.Thread(target=self._watch, name="xtts-ft-peer-watch", daemon=True)

    def start(self) -> PeerWatch:
        self._thread.start()
        return self

    def close(self) -> None:
        with self._ending:
            self._closed.set()

    def _watch(self) -> None:
        unreachable_since: Optional[float] = None
        while not self._closed.is_set():
            try:
                notice = self.board.notice()
                unreachable_since = None
            except dist.DistError as exc:  # the store's host (machine 0's agent) has gone
                notice = None
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > self.lost_grace_s:
                    self._finish(f"stopped: lost contact with the main machine's store ({first_line(exc)}); "
                                 f"its own output says why")
                    return
            if notice is not None and notice.rank != self.board.rank:
                self._acknowledge()
                self._finish(notice.stopped_line())
                return
            self._closed.wait(self.poll_s)

    def _acknowledge(self) -> None:
        try:
            self.board.acknowledge()
        except dist.DistError as exc:  # the poster has gone already: it only waited to be read
            log.debug("could not acknowledge the failure notice: %s", exc)

    def _finish(self, line: str) -> None:
        with self._ending:
            if not self._closed.is_set():
                self._closed.set()
                self._end(line)

    def failed(self, exc: BaseException) -> Optional[BaseException]:
        """The exception ending this rank, seen by the board. Returns what to raise instead (one line saying which
        rank failed first), or None to raise ``exc`` itself (posted for the others when it came first)."""
        self.close()
        try:
            return self._failed(exc)
        except dist.DistError as error:  # the store is gone too: say what this rank knows
            log.debug("the failure notice board is unreachable: %s", error)
            return PeerFailed(f"stopped: lost contact with the other ranks ({first_line(exc)})") \
                if is_lost_peer(exc) else None

    def _failed(self, exc: BaseException) -> Optional[BaseException]:
        if isinstance(exc, PeerFailed):  # told by another rank through a collective: that rank posts
            self.board.acknowledge()
            return None
        lost = is_lost_peer(exc)
        notice = self.board.notice()
        end = time.monotonic() + ACK_WAIT_S
        while lost and notice is None and time.monotonic() < end:  # a peer went away: wait a moment for its line
            time.sleep(0.1)
            notice = self.board.notice()
        line = f"lost contact with another rank ({first_line(exc)})" if lost else first_line(exc)
        standing = notice if notice is not None else self.board.post(line)
        if standing.rank != self.board.rank:  # another rank failed first
            self.board.acknowledge()
            return PeerFailed(standing.stopped_line()) if lost else None  # this rank's own error still says why
        self.board.wait_for_acks()
        return PeerFailed(f"stopped: {line}; that rank's own output says why") if lost else None


def post_failure(line: str, environ: Mapping[str, str] = os.environ) -> None:
    """Post a failure found before the process group started (a config mistake on this machine), so that the
    ranks waiting for this one stop too; nothing outside torchrun. When another rank posted first (both refused by
    the same held lock, say), this one reads its notice instead of waiting for reads that nobody would make."""
    try:
        board = PeerBoard.from_env(environ)
        if board is None:
            return
        if board.post(line).rank != board.rank:
            board.acknowledge()
        else:
            board.wait_for_acks()
    except dist.DistError as exc:  # the job's store is unreachable: the others learn it from their agents
        log.debug("could not post the failure for the other ranks: %s", exc)

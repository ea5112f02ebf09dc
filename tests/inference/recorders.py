"""Stand-ins for a CUDA graph recorder that the graph tests share (the real one needs a GPU)."""

from __future__ import annotations

import contextlib

import torch


def refused(step):
    """A recorder that fails as a capture does when the step holds an operation a graph cannot (two lines: the
    decoders must keep the first)."""
    raise RuntimeError("operation not permitted when stream is capturing\nmore detail")


def graph_like(step):
    """A recorder that, like a CUDA graph and unlike ``call_directly``, hands back the same output tensors at every
    replay, written over with the new results."""
    outputs = step()

    def replay():
        for buffer, new in zip(outputs, step()):
            buffer.copy_(new)
        return outputs

    return replay


def tf32_like(step):
    """A recorder that does what a card's does when TF32 is on while it records: the recorded kernels (over other
    shapes than the eager computation's) keep TF32's 10-bit mantissa, so the replay's first output differs from the
    eager result by a few parts in a thousand. With TF32 off it replays the step exactly."""
    rounded = torch.backends.cuda.matmul.allow_tf32  # read while recording: a graph keeps the kernels it was made with

    def replay():
        out = step()
        if not rounded:
            return out
        if isinstance(out, torch.Tensor):
            return out * (1 + 3e-3)
        return (out[0] * (1 + 3e-3), *out[1:])

    return replay


class _Stream:
    """A stand-in CUDA stream: one of the pool's (or the default stream), compared by which one it is."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Stream) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"stream {self.name}"

    def wait_stream(self, other: _Stream) -> None:
        pass


class StandInCuda:
    """torch.cuda's streams and graphs as a CPU test needs them: ``torch.cuda.Stream()`` hands out the streams of a
    pool of ``pool_size`` in turn, as c10's CUDAStream pool does (32 per device and priority), ``torch.cuda.stream``
    makes one current, and every graph notes the stream that was current when its capture began (``captured_on``)."""

    def __init__(self, pool_size: int = 32) -> None:
        self.pool_size = pool_size
        self.handed_out = 0
        self.default = _Stream("default")  # the default stream is not one of the pool's
        self.current = self.default
        self.captured_on: list[_Stream] = []

    def new_stream(self, device=None, priority: int = 0) -> _Stream:
        stream = _Stream(f"pool {self.handed_out % self.pool_size}")
        self.handed_out += 1
        return stream

    @contextlib.contextmanager
    def stream(self, stream: _Stream):
        before, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = before

    def install(self, monkeypatch) -> None:
        """Stand in for torch.cuda's stream and graph calls, and start with no capture stream made."""
        from xtts_ft.inference import decode_graph

        cuda = self

        class Graph:
            def capture_begin(self, pool=None, capture_error_mode="global"):
                cuda.captured_on.append(cuda.current)

            def capture_end(self):
                pass

            def replay(self):
                pass

        monkeypatch.setattr(torch.cuda, "Stream", self.new_stream)
        monkeypatch.setattr(torch.cuda, "stream", self.stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: self.current)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
        monkeypatch.setattr(decode_graph, "_capture_streams", {}, raising=False)  # none made yet (the old recorder: none kept)


def assert_turned_off_once(graphed, why: str, rows, eager, records, said: str) -> None:
    """After a recording that failed or differed: ``graphed`` (a fixed-shape step, head or prefill) turned off with
    ``why`` in one line and recorded or replayed nothing, every row kept its eager codes, and the log said ``said``
    once (``records``: caplog's records)."""
    assert graphed.disabled is not None and why in graphed.disabled and "\n" not in graphed.disabled
    assert graphed.recordings == 0 and graphed.replays == 0
    assert [r.codes for r in rows] == [r.codes for r in eager]
    assert sum(said in r.message for r in records) == 1

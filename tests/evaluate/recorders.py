"""Stand-ins for a CUDA graph recorder that the graph tests share (the real one needs a GPU)."""

from __future__ import annotations


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

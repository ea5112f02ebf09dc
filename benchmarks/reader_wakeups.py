"""The decode loop with N readers: each reader woken when its chunk is ready, against woken at every code.

    python benchmarks/reader_wakeups.py --callers 8 32
    python benchmarks/reader_wakeups.py --size full --callers 32 --codes 40 --device cuda

Each caller's reader waits for its stream's codes as the speech engine does (the first chunk after
``--first`` codes, then every ``--every``), while one :class:`xtts_ft.serve.decode_loop.DecodeLoop` decodes all
of them together (a random GPT: ``--size small`` or the full XTTS-v2 size; no vocoder, so only the decode
thread and the readers compete). Two ways, alternated ``--rounds`` times in one run:

- ``every code``: the loop as it was, notifying a stream's reader after every step (the reader wakes, sees its
  chunk is not complete, and waits again);
- ``chunk ready``: the loop now, notifying a reader only when the count it waits for is reached or the stream
  ends (:class:`xtts_ft.serve.decode_loop.Stream`).

Printed per callers count: the best wall time of each way for every stream to finish, steps per second, the
readers' wake-ups, and the ratio; the codes of both ways must be the same (the notification changes who wakes,
never what is decoded).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_step import requests  # noqa: E402
from gpu_throughput import FULL, SMALL, build_gpt  # noqa: E402

from xtts_ft.serve import decode_loop  # noqa: E402


class EveryCodeStream(decode_loop.Stream):
    """The stream before: its reader notified after every step, whatever it waits for (it never says what it waits
    for, so every update notifies)."""

    def wait(self, have: int, timeout: float) -> int:
        with self._cond:
            if self.produced <= have and not self.finished:
                if self._cond.wait(timeout):
                    self.wakeups += 1
            if self.error is not None:
                raise self.error
            return self.produced


class EveryCodeLoop(decode_loop.DecodeLoop):
    """The loop handing out :class:`EveryCodeStream` streams."""

    stream_type = EveryCodeStream


def one_run(gpt, size: dict, callers: int, codes: int, first: int, every: int, device: torch.device,
            loop_type: type[decode_loop.DecodeLoop]) -> tuple[float, int, int, list[list[int]]]:
    """Seconds until every stream ended, the loop's steps, the readers' wake-ups, the codes."""
    rows = requests(gpt, size, callers, device, max_codes=codes)
    loop = loop_type(gpt, max_active=callers)
    start = time.perf_counter()
    streams = [loop.submit(request) for request in rows]

    def reader(stream) -> None:  # as SpeechEngine._codes waits
        goal = first
        while True:
            have = stream.wait(goal - 1, timeout=0.05)
            if stream.finished:
                return
            if have >= goal:
                goal = have + every

    threads = [threading.Thread(target=reader, args=(s,)) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    loop.close()
    return seconds, loop.steps, sum(s.wakeups for s in streams), [r.codes for r in rows]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=["small", "full"], default="small")
    p.add_argument("--callers", type=int, nargs="+", default=[8, 32])
    p.add_argument("--codes", type=int, default=None,
                   help="codes each stream decodes (default 120, at most what the GPT's positions allow)")
    p.add_argument("--first", type=int, default=10, help="codes before the first chunk (serve's default)")
    p.add_argument("--every", type=int, default=40, help="codes per later chunk (serve's default)")
    p.add_argument("--rounds", type=int, default=2, help="runs of each way, alternated (the best is printed)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--threads", type=int, default=None, help="torch threads on the CPU (default: torch's)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    size = FULL if args.size == "full" else SMALL
    args.codes = min(args.codes or 120, size["max_mel_tokens"] - 2)  # the small GPT has 80 audio positions
    torch.manual_seed(0)
    gpt = build_gpt(size, device).eval()
    with torch.no_grad():  # a random GPT says stop at random: every stream decodes all its codes
        gpt.mel_head.bias[gpt.stop_audio_token] = -1e4
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"decode loop with readers, {args.size} random GPT, {name}; {args.codes} codes per stream, first chunk "
          f"{args.first}, then every {args.every}; best of {args.rounds}", flush=True)
    ways: dict[str, type[decode_loop.DecodeLoop]] = {"every code": EveryCodeLoop, "chunk ready": decode_loop.DecodeLoop}
    failures = 0
    for callers in args.callers:
        best: dict[str, tuple[float, int, int]] = {}
        codes: dict[str, list[list[int]]] = {}
        for _ in range(args.rounds):
            for way, loop_type in ways.items():
                seconds, steps, wakeups, codes[way] = one_run(gpt, size, callers, args.codes, args.first, args.every,
                                                              device, loop_type)
                if way not in best or seconds < best[way][0]:
                    best[way] = (seconds, steps, wakeups)
        same = codes["every code"] == codes["chunk ready"]
        failures += 0 if same else 1
        cells = "; ".join(f"{way} {1000 * s:.0f} ms ({steps / s:.0f} steps/s, {wakeups} wake-ups)"
                          for way, (s, steps, wakeups) in best.items())
        print(f"callers {callers:3d}: {cells}; ratio {best['every code'][0] / best['chunk ready'][0]:.2f}x; codes "
              f"{'identical' if same else 'DIFFER (failed)'}", flush=True)
    if failures:
        raise SystemExit(f"{failures} comparison(s) gave different codes")


if __name__ == "__main__":
    main()

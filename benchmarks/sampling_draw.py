"""Drawing each row's code: ``torch.multinomial`` row by row against :func:`xtts_ft.inference.batch_decode.draw`.

    python benchmarks/sampling_draw.py --batches 1 8 32
    python benchmarks/sampling_draw.py --device cuda --batches 1 8 32

Each decode step draws one code per row, each with the row's own generator (a request's codes must not depend
on who else is in the batch). The engine first called ``torch.multinomial`` once per row; ATen checks that
call's input with about a dozen small operations (min, max, comparisons, a sum, two asserts) before its draw
(exponential noise, a division, an argmax), and on a GPU each of those is a kernel launch. ``draw`` makes the
same draw per row with the row's generator and does the division and the argmax once for all rows; the logits
are checked once per step by the decoder instead.

For each batch size both ways draw from the same probabilities (coqui's sampling over the 8194 audio codes of
random logits) with generators seeded alike, ``--repeats`` times; printed: the aten operations each way runs per
step (counted with torch's profiler, nested ones included: on a GPU most of them are a kernel each), the time
per step, the ratio, and whether every code and every generator's state came out the same (a difference is a
failure: exit status 1).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xtts_ft.inference.batch_decode import Sampling, draw  # noqa: E402

VOCAB = 8194  # XTTS-v2's audio codes


def row_by_row(probs: torch.Tensor, generators: list[torch.Generator]) -> torch.Tensor:
    """What the engine did before ``draw``: one ``torch.multinomial`` per row."""
    return torch.cat([torch.multinomial(probs[i:i + 1], num_samples=1, generator=g)[0] for i, g in enumerate(generators)])


def aten_ops(way, probs: torch.Tensor, generators: list[torch.Generator]) -> int:
    """The aten operations one call of ``way`` runs, nested ones included."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        way(probs, generators)
    return sum(1 for event in prof.events() if event.name.startswith("aten::"))


def measure(way, probs: torch.Tensor, device: torch.device, repeats: int) -> tuple[float, list[torch.Tensor], list]:
    """Seconds per call of ``way`` over ``repeats`` calls (after one untimed), its codes, the generators' states."""
    generators = [torch.Generator(device=device).manual_seed(i) for i in range(probs.shape[0])]
    way(probs, generators)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    codes = []
    start = time.perf_counter()
    for _ in range(repeats):
        codes.append(way(probs, generators))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / repeats, [c.cpu() for c in codes], [g.get_state() for g in generators]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    sampling = Sampling()
    failed = False
    print(f"device {device}; {VOCAB} codes; coqui's sampling (temperature {sampling.temperature}, top-k {sampling.top_k}, "
          f"top-p {sampling.top_p}); {args.repeats} steps per row count", flush=True)
    print("| rows | aten ops per step: row by row | draw | time per step: row by row | draw | ratio | same codes |", flush=True)
    print("|---|---|---|---|---|---|---|", flush=True)
    for rows in args.batches:
        logits = torch.randn(rows, VOCAB, generator=torch.Generator().manual_seed(rows)).mul_(4).to(device)
        with torch.inference_mode():
            probs = F.softmax(sampling.warp(logits), dim=-1)
            gens = [torch.Generator(device=device).manual_seed(i) for i in range(rows)]
            ops_old = aten_ops(row_by_row, probs, gens)
            ops_new = aten_ops(draw, probs, gens)
            old, old_codes, old_states = measure(row_by_row, probs, device, args.repeats)
            new, new_codes, new_states = measure(draw, probs, device, args.repeats)
        same = all(torch.equal(a, b) for a, b in zip(old_codes, new_codes)) and all(
            torch.equal(a, b) for a, b in zip(old_states, new_states))
        failed = failed or not same
        print(f"| {rows} | {ops_old} | {ops_new} | {old * 1e3:.3f} ms | {new * 1e3:.3f} ms | {old / new:.2f}x | "
              f"{'yes' if same else 'NO (failure)'} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""One decode step of XTTS's GPT for B requests at once: the first batched decoder against the current one.

    python benchmarks/decode_step.py --size full --batches 1 8 16 32
    python benchmarks/decode_step.py --size full --device cuda --precision bf16 --batches 1 8 32

Both decoders decode the same requests (a random GPT of the real XTTS-v2 size with ``--size full``:
30 layers x 1024 channels, 8194 audio codes; random conditioning and text of 20-50 tokens per row,
coqui's sampling) in the same process, one after the other for each batch size:

- ``reference``: :class:`xtts_ft.inference.batch_decode_reference.ReferenceDecoder` (a ``DynamicCache``
  rebuilt and concatenated at every step, the output head and the logits processors row by row with a
  host read per row);
- ``current``: :class:`xtts_ft.inference.batch_decode.BatchDecoder` (the cache written in place, one
  batched choice and one host read per step);
- ``graphs``: the same decoder with its step replayed from a CUDA graph
  (:mod:`xtts_ft.inference.decode_graph`), on CUDA; on the CPU ``fixed shapes``: the same fixed-shape step
  run directly (no graph to record: it shows the path works and what its extra masked columns cost);
- ``graphs + head``: the same with the step's head (final norm, output head, penalty, warpers, softmax) replayed
  from a graph too (:mod:`xtts_ft.inference.head_graph`); on the CPU ``fixed shapes + head``;
- ``graphs + head + fused GELU``: the same with the recorded blocks' GELU as one kernel instead of eight
  (:func:`xtts_ft.inference.decode_cache.mlp`);
- ``... + overlap``: the same with each step launched before the one before it is read back
  (:mod:`xtts_ft.inference.step_in_flight`), as serve runs it on a card.

With ``--precision bf16`` (CUDA) the current and graphed decoders run the GPT-2 blocks' weights cast to bf16 once
(``decode_transformer``, what serve's ``--decode-precision bf16`` runs), and two more run under bf16 autocast as the
engine first did: the reference, and ``autocast`` (the current decoder under autocast).

After ``--warmup`` steps, ``--steps`` steps are timed; the printed ratios are reference / current (and autocast /
current), current / graphs and each graphed way against the one before it; one more step counts the operations each
decoder launches one by one (outside graph replays: on a card, each a launch) and, on the CPU, those inside. In
fp32 (TF32 off while comparing) the reference and current decoders must give the same codes for every row (checked;
a difference is printed as a failure); in bf16 another kernel's rounding changes a sampled code and the rows drift
apart, so the rows found identical are counted, not checked. The graphed step is checked against the eager step at
every recording, and rounding may change a sampled code, so its rows are counted, and graphs turned off are a
failure. Then, for each batch size above 1, the current decoder prefills that many requests one by one and together
(one right-padded forward pass, as the serving loop does with requests that arrive together): both times, and
whether the next 10 codes of every row are the same either way (checked in fp32 only, as above). For every batch
size the same two prefills run again through the fixed-shape prefill (:mod:`xtts_ft.inference.prefill_graph`: CUDA
graphs on a card; on the CPU run directly), after an untimed run that records its buckets: both times, the ratios
to the eager prefill, the recordings and replays, and how many rows' next 10 codes stayed the same. The codes per
second of all rows are also given as seconds of audio per second (21.5 codes per second of audio).
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Optional

import torch
from torch.profiler import ProfilerActivity, profile, record_function

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_throughput import FULL, SMALL, build_gpt  # noqa: E402

from xtts_ft.inference.batch_decode import (  # noqa: E402
    BatchDecoder,
    DecodeRequest,
    DecoderParts,
    Sampling,
    decode_transformer,
    prefill_forward,
    prefix_embeddings,
)
from xtts_ft.inference.batch_decode_reference import ReferenceDecoder  # noqa: E402
from xtts_ft.inference.decode_graph import FixedShapeStep, call_directly, cuda_graph  # noqa: E402
from xtts_ft.inference.head_graph import FixedShapeHead  # noqa: E402
from xtts_ft.inference.prefill_graph import FixedShapePrefill  # noqa: E402

CODES_PER_AUDIO_SECOND = 22050 / 1024  # XTTS-v2's DVAE: one code per 1024 samples at 22.05 kHz


def decoders(device: torch.device, blocks) -> dict:
    """The decoders compared on ``device``: name -> (a function of the GPT and the most rows giving a fresh decoder,
    whether it runs under bf16 autocast). ``blocks``: the GPT-2 blocks in the decode dtype (``decode_transformer``;
    in bf16 a cast copy, and the autocast the engine first used is measured beside it)."""
    fixed_name, record = ("graphs", cuda_graph) if device.type == "cuda" else ("fixed shapes", call_directly)
    record = marked(record)
    half = next(blocks.parameters()).dtype != torch.float32
    compared = {"reference": (lambda gpt, rows: ReferenceDecoder(gpt), half)}
    if half:
        compared["autocast"] = (lambda gpt, rows: BatchDecoder(gpt), True)
    compared["current"] = (lambda gpt, rows: BatchDecoder(gpt, DecoderParts(transformer=blocks)), False)
    compared[fixed_name] = (lambda gpt, rows: BatchDecoder(gpt, DecoderParts(
        transformer=blocks, step=FixedShapeStep(record=record), max_rows=rows)), False)
    for name, fused, overlap in ((f"{fixed_name} + head", False, False), (f"{fixed_name} + head + fused GELU", True, False),
                                 ("... + overlap", True, True)):
        compared[name] = (lambda gpt, rows, fused=fused, overlap=overlap: BatchDecoder(gpt, DecoderParts(
            transformer=blocks, step=FixedShapeStep(record=record, fused_gelu=fused), max_rows=rows,
            head=FixedShapeHead(record=record), overlap=overlap)), False)
    return compared


def requests(gpt, size: dict, batch: int, device: torch.device, max_codes: int) -> list[DecodeRequest]:
    draw = torch.Generator().manual_seed(batch)
    out = []
    for i in range(batch):
        text = torch.randint(1, size["number_text_tokens"] - 2, (1, 20 + (7 * i) % 31), dtype=torch.int32,
                             generator=draw).to(device)
        cond = torch.randn(1, 32, size["model_dim"], generator=draw).to(device)
        with torch.inference_mode():
            out.append(DecodeRequest(prefix_embeddings(gpt, cond, text), max_codes, Sampling(), seed=i))
    return out


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def marked(record):
    """``record``, its replays marked for the profiler: what runs inside them is one launch on a card."""
    def recorder(step):
        replay = record(step)

        def marked_replay():
            with record_function(REPLAY):
                return replay()
        return marked_replay
    return recorder


REPLAY = "graph replay"


def launched(step) -> tuple[int, int]:
    """The top-level aten operations of ``step()``: those launched one by one, outside graph replays (on a card each
    is a kernel launch or more, a few to tens of microseconds of host time), and those inside replays (on the CPU,
    where the recorder runs the step: what a graph holds, each a kernel or more that the card runs in turn)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    outside = inside = 0
    for event in prof.events():
        if not event.name.startswith("aten::"):
            continue
        parent, replayed = event.cpu_parent, False
        while parent is not None and not parent.name.startswith("aten::"):
            replayed = replayed or parent.name == REPLAY
            parent = parent.cpu_parent
        if parent is None:  # top-level: no aten operation above it
            inside += replayed
            outside += not replayed
    return outside, inside


def measure(make_decoder, gpt, size: dict, batch: int, device: torch.device, autocast_bf16: bool, warmup: int,
            steps: int) -> tuple[float, list[list[int]], object, tuple[int, int]]:
    """Seconds per step of ``steps`` timed steps after joining ``batch`` rows and ``warmup`` steps; the codes; the
    decoder; the operations one more (untimed) step launched one by one (:func:`launched`)."""
    rows = requests(gpt, size, batch, device, max_codes=2 + warmup + steps)
    decoder = make_decoder(gpt, batch)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if autocast_bf16 else nullcontext()
    with torch.inference_mode(), autocast:
        for request in rows:
            decoder.join(request)
        for _ in range(warmup):
            decoder.step()
        sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            decoder.step()
        sync(device)
        seconds = (time.perf_counter() - start) / steps
        ops = launched(decoder.step)
    return seconds, [r.codes for r in rows], decoder, ops


def measure_prefill(gpt, size: dict, batch: int, device: torch.device, blocks, steps: int,
                    prefill: Optional[FixedShapePrefill] = None) -> tuple[dict[str, float], dict[str, list[list[int]]]]:
    """Seconds to prefill ``batch`` requests one by one and together (the current decoder over ``blocks`` either way),
    and the codes each way gives after ``steps`` more steps. ``prefill``: through these fixed-shape prefills (each
    way run once untimed first, so that its buckets are recorded and the timed run replays them)."""
    times, codes = {}, {}
    for way in ("one by one", "together"):
        for timed in ([False, True] if prefill is not None else [True]):
            rows = requests(gpt, size, batch, device, max_codes=1 + steps)
            decoder = BatchDecoder(gpt, DecoderParts(transformer=blocks, prefill=prefill))
            with torch.inference_mode():
                sync(device)
                start = time.perf_counter()
                if way == "together":
                    decoder.join(*rows)
                else:
                    for request in rows:
                        decoder.join(request)
                sync(device)
                times[way] = time.perf_counter() - start
                for _ in range(steps if timed else 0):
                    decoder.step()
        codes[way] = [r.codes for r in rows]
    return times, codes


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=["small", "full"], default="small")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="bf16: autocast, cuda only")
    p.add_argument("--warmup", type=int, default=100,
                   help="steps decoded before the timed ones (the cache holds prefix + warmup positions)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=None, help="torch threads on the CPU (default: torch's)")
    args = p.parse_args(argv)
    if args.precision == "bf16" and args.device != "cuda":
        p.error("--precision bf16 needs --device cuda")
    if args.threads:
        torch.set_num_threads(args.threads)
    failures = compare(args.size, args.batches, torch.device(args.device), args.precision, args.warmup, args.steps)
    if failures:
        raise SystemExit(f"{failures} comparison(s) gave different codes")


@contextmanager
def full_fp32_matmuls():
    """TF32 off while the decoders are compared (a training run in the same process, as the GPU smoke test's, may
    have turned it on): with it, two kernels' products keep a 10-bit mantissa and a sampled code may change."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def compare(size_name: str, batches: list[int], device: torch.device, precision: str, warmup: int,
            steps: int) -> int:
    """Print the step rows and the prefill rows for ``batches``; the number of comparisons whose codes differed."""
    with full_fp32_matmuls():
        return _compare(size_name, batches, device, precision, warmup, steps)


def _compare(size_name: str, batches: list[int], device: torch.device, precision: str, warmup: int,
             steps: int) -> int:
    size = FULL if size_name == "full" else SMALL
    torch.manual_seed(0)
    gpt = build_gpt(size, device).eval()
    with torch.no_grad():  # a random GPT says stop at random: every row must decode every timed step
        gpt.mel_head.bias[gpt.stop_audio_token] = -1e4
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"decode step, {size_name} random GPT ({size['layers']} layers x {size['model_dim']}), {name}, "
          f"{precision}; {warmup} warm-up + {steps} timed steps", flush=True)
    failures = 0
    exact = precision == "fp32"  # bf16: another kernel's rounding changes a sampled code, and the rows drift apart

    def verdict(same: bool, a: list[list[int]], b: list[list[int]]) -> str:
        if same:
            return "identical"
        if exact:
            return "DIFFER (failed)"
        return f"identical in {sum(x == y for x, y in zip(a, b))} of {len(a)} rows (bf16 rounding: not checked)"

    blocks = decode_transformer(gpt, torch.bfloat16 if precision == "bf16" else None)
    compared = decoders(device, blocks)
    fixed_name, head_name, fused_name, overlap_name = list(compared)[-4:]
    for batch in batches:
        times, codes, made, ops = {}, {}, {}, {}
        for name, (make, autocast) in compared.items():
            times[name], codes[name], made[name], ops[name] = measure(make, gpt, size, batch, device, autocast, warmup,
                                                                      steps)
        same = codes["reference"] == codes["current"]
        fixed_step = made[fixed_name].parts.step
        failures += (0 if same or not exact else 1) + (0 if fixed_step.disabled is None else 1)
        failures += sum(made[n].parts.step.disabled is not None or made[n].parts.head.disabled is not None
                        for n in (head_name, fused_name, overlap_name))
        audio = batch / CODES_PER_AUDIO_SECOND  # seconds of audio per step, all rows together
        cells = "; ".join(f"{d} {1000 * t:.1f} ms/step ({audio / t:.2f} s of audio per s)" for d, t in times.items())
        fixed_same = sum(a == b for a, b in zip(codes[fixed_name], codes["current"]))
        state = (f"off ({fixed_step.disabled}; FAILED)" if fixed_step.disabled else
                 f"{fixed_step.recordings} recording(s), {fixed_step.replays} replays, "
                 f"{fixed_same} of {batch} rows' codes identical to current's")
        later = []
        for before, name in ((fixed_name, head_name), (head_name, fused_name), (fused_name, overlap_name)):
            head = made[name].parts.head
            kept = sum(a == b for a, b in zip(codes[name], codes[before]))
            later.append(f"{name}: off ({head.disabled or made[name].parts.step.disabled}; FAILED)"
                         if head.disabled or made[name].parts.step.disabled else
                         f"{name}: {head.recordings} head recording(s), {head.replays} replays, {kept} of {batch} rows' "
                         f"codes identical to {before}'")
        autocast = f"autocast/current {times['autocast'] / times['current']:.2f}x, " if "autocast" in times else ""
        print(f"batch {batch:3d}: {cells}; ratio reference/current {times['reference'] / times['current']:.2f}x, "
              f"{autocast}current/{fixed_name} {times['current'] / times[fixed_name]:.2f}x, "
              f"{fixed_name}/{head_name} {times[fixed_name] / times[head_name]:.2f}x, "
              f"{head_name}/{fused_name} {times[head_name] / times[fused_name]:.2f}x, "
              f"{fused_name}/{overlap_name} {times[fused_name] / times[overlap_name]:.2f}x; codes "
              f"{verdict(same, codes['reference'], codes['current'])}; {fixed_name}: {state}; " + "; ".join(later), flush=True)
        print(f"batch {batch:3d}: operations launched one by one per step (outside graphs): "
              + ", ".join(f"{d} {n}" for d, (n, _) in ops.items()), flush=True)
        if device.type == "cpu":  # a card's profiler sees a replay as one call, not what it holds
            print(f"batch {batch:3d}: operations inside the recorded graphs per step: "
                  + ", ".join(f"{d} {n}" for d, (_, n) in ops.items() if n), flush=True)
    for batch in batches:
        times, codes = measure_prefill(gpt, size, batch, device, blocks, steps=10)
        same = codes["one by one"] == codes["together"]
        failures += 0 if same or not exact else 1
        if batch > 1:
            print(f"prefill of {batch:3d} requests: one by one {1000 * times['one by one']:.1f} ms; together "
                  f"{1000 * times['together']:.1f} ms; ratio {times['one by one'] / times['together']:.2f}x; "
                  f"codes of the next 10 steps {verdict(same, codes['one by one'], codes['together'])}", flush=True)
        graphed = FixedShapePrefill(prefill_forward, record=cuda_graph if device.type == "cuda" else call_directly)
        fixed_times, fixed_codes = measure_prefill(gpt, size, batch, device, blocks, steps=10, prefill=graphed)
        failures += 0 if graphed.disabled is None else 1
        kept = sum(a == b for way in codes for a, b in zip(codes[way], fixed_codes[way]))
        state = (f"off ({graphed.disabled}; FAILED)" if graphed.disabled else
                 f"{graphed.recordings} recording(s), {graphed.replays} replays; {kept} of {2 * batch} rows' next "
                 "10 codes identical to the eager prefill's")
        print(f"prefill {fixed_name} of {batch:3d} requests: one by one {1000 * fixed_times['one by one']:.1f} ms "
              f"(eager/{fixed_name} {times['one by one'] / fixed_times['one by one']:.2f}x); together "
              f"{1000 * fixed_times['together']:.1f} ms ({times['together'] / fixed_times['together']:.2f}x); {state}",
              flush=True)
    return failures


if __name__ == "__main__":
    main()

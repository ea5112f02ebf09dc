"""HiFiGAN over several callers' streamed windows: one call per window against one call for all of them.

    python benchmarks/vocoder_windows.py --batches 1 8 32
    python benchmarks/vocoder_windows.py --device cuda --batches 1 8 32

The speech engine vocodes each streamed chunk as a window of upsampled GPT latents
(:class:`xtts_ft.inference.streaming_vocoder.Window`). On CUDA the caller whose vocoder turn it is also
takes the windows waiting behind it into the same call (``ServeConfig.vocoder_batch``,
:func:`xtts_ft.inference.streaming_vocoder.vocode_windows`: right-padded to the longest); on the CPU
each window has its own call. This times both ways on XTTS-v2's HiFiGAN (random weights, the real
size), for windows the size of a first chunk (10 codes: 44 frames) and of a later one (40 codes and
the left context: 190 frames), alternating, and checks that the kept audio of each window is the same
either way (the padding reaches only the look-ahead, which is not kept): to fp32 rounding, or on a GPU with
TF32 convolutions (cuDNN's default, as the engine runs) to 1e-2 relative: a batch of another size runs other
kernels, and TF32 products keep a 10-bit mantissa (``--tf32 off`` checks the fp32 bound on a GPU).

First, one window as HiFiGAN computes it with coqui's weight norm (every weight computed again from
``g`` and ``v`` at each call) and with the weights folded once, as the engine does
(:func:`xtts_ft.inference.streaming_vocoder.fold_weight_norm`): both times, and whether the audio is the same.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xtts_ft.inference.streaming_vocoder import LOOKAHEAD_FRAMES, Window, fold_weight_norm, vocode_windows  # noqa: E402

WINDOW_FRAMES = (44, 190)  # a first chunk's window, a later chunk's (frames of 256 samples at 24 kHz)


def build_hifigan(device: torch.device):
    """XTTS-v2's HiFiGAN decoder (coqui's ``HifiDecoder`` defaults are XTTS-v2's sizes), random weights."""
    from TTS.tts.layers.xtts.hifigan_decoder import HifiDecoder

    torch.manual_seed(0)
    return HifiDecoder().to(device).eval()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def compare_folded(device: torch.device, frames: int, repeats: int) -> bool:
    """Print one window's time with the weight norm recomputed and folded (two generators, the same weights); whether
    their audio is identical."""
    recomputing, folded = build_hifigan(device), build_hifigan(device)
    count = fold_weight_norm(folded)
    draw = torch.Generator().manual_seed(2)
    z = torch.randn(1, int(folded.waveform_decoder.conv_pre.in_channels), frames, generator=draw).to(device)
    g = torch.randn(1, 512, 1, generator=draw).to(device)
    times, outs = {}, {}
    with torch.inference_mode():
        for name, hifigan in (("recomputed", recomputing), ("folded", folded)):
            hifigan.waveform_decoder(z, g=g)  # warm-up
            best = float("inf")
            for _ in range(max(repeats, 1)):
                _sync(device)
                start = time.perf_counter()
                outs[name] = hifigan.waveform_decoder(z, g=g)
                _sync(device)
                best = min(best, time.perf_counter() - start)
            times[name] = best
    same = torch.equal(outs["recomputed"], outs["folded"])
    print(f"weight norm, one window of {frames} frames: recomputed {1000 * times['recomputed']:.1f} ms; folded "
          f"({count} convolutions) {1000 * times['folded']:.1f} ms; ratio {times['recomputed'] / times['folded']:.2f}x; "
          f"audio {'identical' if same else 'DIFFERS (failed)'}", flush=True)
    return same


def _tolerance(device: torch.device) -> float:
    """The largest relative difference of the kept audio accepted between one call per window and one for all: fp32
    rounding (1e-4); with TF32 convolutions on a GPU (cuDNN's default) 1e-2, because a batch of another size runs
    other kernels whose products keep only TF32's 10-bit mantissa (``--tf32 off`` checks the fp32 bound there)."""
    return 1e-2 if device.type == "cuda" and torch.backends.cudnn.allow_tf32 else 1e-4


def compare(hifigan, batches: list[int], device: torch.device, repeats: int = 2,
            window_frames: tuple[int, ...] = WINDOW_FRAMES) -> int:
    """Print a row per batch size (windows of ``window_frames`` in turn); the number of batch sizes whose kept audio
    differed."""
    draw = torch.Generator().manual_seed(1)
    channels = int(hifigan.waveform_decoder.conv_pre.in_channels)
    hop = int(hifigan.output_hop_length)
    failures = 0
    for batch in batches:
        windows = []
        for i in range(batch):
            frames = window_frames[i % len(window_frames)]
            windows.append(Window(torch.randn(channels, frames, generator=draw).to(device),
                                  torch.randn(1, 512, 1, generator=draw).to(device), final=False, keep_from=0,
                                  keep_to=(frames - LOOKAHEAD_FRAMES) * hop))
        times = {}
        with torch.inference_mode():
            vocode_windows(hifigan, windows[:1])  # warm-up (kernel choice)
            for way in ("one by one", "together"):
                best = float("inf")
                for _ in range(repeats):
                    _sync(device)
                    start = time.perf_counter()
                    out = ([vocode_windows(hifigan, [w])[0] for w in windows] if way == "one by one"
                           else vocode_windows(hifigan, windows))
                    _sync(device)
                    best = min(best, time.perf_counter() - start)
                times[way] = (best, out)
        alone, shared = times["one by one"][1], times["together"][1]
        error = max(float((a[:w.keep_to] - s[:w.keep_to]).abs().max()) / max(float(a.abs().max()), 1e-9)
                    for a, s, w in zip(alone, shared, windows))
        same = error <= _tolerance(device)
        failures += 0 if same else 1
        one, together = times["one by one"][0], times["together"][0]
        print(f"windows {batch:3d}: one by one {1000 * one:.1f} ms; together {1000 * together:.1f} ms; ratio "
              f"{one / together:.2f}x; kept audio max relative difference {error:.1e}"
              f"{'' if same else ' (DIFFERS: failed)'}", flush=True)
    return failures


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--frames", type=int, nargs="+", default=list(WINDOW_FRAMES),
                   help=f"window lengths in frames, in turn (more than {LOOKAHEAD_FRAMES}, the look-ahead not kept)")
    p.add_argument("--repeats", type=int, default=2, help="timed runs of each way (the best is printed)")
    p.add_argument("--threads", type=int, default=None, help="torch threads on the CPU (default: torch's)")
    p.add_argument("--tf32", choices=["default", "off"], default="default",
                   help="cuda: off runs the convolutions in full fp32 (torch's default lets cuDNN use TF32)")
    args = p.parse_args(argv)
    if args.tf32 == "off":
        torch.backends.cudnn.allow_tf32 = False  # this benchmark's own process
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    if min(args.frames) <= LOOKAHEAD_FRAMES:
        p.error(f"--frames: every window needs more than {LOOKAHEAD_FRAMES} frames")
    print(f"HiFiGAN (XTTS-v2 size, random weights) over streamed windows of {' and '.join(map(str, args.frames))} "
          f"frames, {name}, fp32" + (f"; TF32 convolutions {'on' if torch.backends.cudnn.allow_tf32 else 'off'}; "
                                     f"kept audio checked to {_tolerance(device):.0e}" if device.type == "cuda" else ""),
                                     flush=True)
    failures = 0 if compare_folded(device, args.frames[0], max(args.repeats, 3)) else 1
    hifigan = build_hifigan(device)
    fold_weight_norm(hifigan)  # as the engine vocodes
    failures += compare(hifigan, args.batches, device, args.repeats, tuple(args.frames))
    if failures:
        raise SystemExit(f"{failures} comparison(s) gave different audio")


if __name__ == "__main__":
    main()

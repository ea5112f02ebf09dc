"""A reader's host work per chunk: planning its HiFiGAN window (the first way against now) and finding its voice.

    python benchmarks/reader_host_work.py
    python benchmarks/reader_host_work.py --device cuda --codes 800

Every streamed chunk of every caller runs in that caller's thread, between the decode loop's steps, and takes the
GIL while it runs; at 32 callers these costs queue behind one another (issue 33's first audio). Two of them:

- **planning the window** (:meth:`xtts_ft.inference.streaming_vocoder.StreamingVocoder.plan`): the upsampled frames
  of the chunk's window. The first way (:mod:`xtts_ft.inference.streaming_vocoder_reference`) stacked every latent
  of the utterance so far at every chunk and worked out the indices with about twenty small tensor operations on
  the latents' device, one of them ``torch.unique`` (on a GPU a wait for the stream). Now the index tables are
  built on the host with NumPy and only the window's latents are stacked.
- **finding the voice's latents** (:meth:`xtts_ft.serve.voices.VoiceLibrary.latents`, twice per piece): the first
  way read and hashed the clip's bytes at every lookup; now only when its file changed (a ``stat``).

One utterance of ``--codes`` latents (XTTS-v2's 1024 dimensions and HiFiGAN geometry; a stand-in for HiFiGAN's
audio: only the planning is timed) goes through both vocoders chunk by chunk (first chunk 10 codes, then
``--chunk``). Printed for some chunks: codes so far, the aten operations each plan runs (on a GPU most are a
kernel each), the time per plan each way (``--repeats`` calls), the ratio, and whether the frames are the same bit
for bit (a difference is a failure: exit status 1); then the totals over the utterance and the voice lookup.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xtts_ft.inference.streaming_vocoder import StreamingVocoder  # noqa: E402
from xtts_ft.inference.streaming_vocoder_reference import ReferenceStreamingVocoder  # noqa: E402
from xtts_ft.serve.voices import VoiceLibrary  # noqa: E402

HIFIGAN = SimpleNamespace(output_hop_length=256, ar_mel_length_compression=1024, output_sample_rate=24000,
                          input_sample_rate=22050)  # XTTS-v2's
DIM = 1024  # XTTS-v2's latents
CLIP = ROOT / "datasets" / "amharic_demo" / "wavs" / "spk1_001.flac"


def aten_ops(fn) -> int:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(1 for event in prof.events() if event.name.startswith("aten::"))


def timed(fn, repeats: int, device: torch.device) -> float:
    """Seconds per call of ``fn`` (after one untimed)."""
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / repeats


def plans(codes: int, chunk: int, repeats: int, device: torch.device) -> bool:
    """Both vocoders through one utterance; prints a row per shown chunk and the totals; whether all frames agreed."""
    gen = torch.Generator().manual_seed(0)
    latents = torch.cumsum(torch.randn(codes, DIM, generator=gen) * 0.3, dim=0).to(device)
    g = torch.zeros(1, 512, 1, device=device)
    new, first = StreamingVocoder(HIFIGAN, g), ReferenceStreamingVocoder(HIFIGAN, g)
    sizes = [10] + [chunk] * ((codes - 10 + chunk - 1) // chunk)
    shown = {0, 1, 2, len(sizes) // 2, len(sizes) - 2, len(sizes) - 1}
    print("| chunk | codes so far | aten ops: first way | now | time per plan: first way | now | ratio | same frames |",
    flush=True)
    print("|---|---|---|---|---|---|---|---|", flush=True)
    given, same, total_old, total_new = 0, True, 0.0, 0.0
    for i, size in enumerate(sizes):
        part = list(latents[given:given + size])
        given = min(codes, given + size)
        final = given >= codes
        new.add(part)
        first.add(part)
        a, b = new.plan(final), first.plan(final)
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            same = same and isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and np.array_equal(a, b)
            continue
        agree = torch.equal(a.frames, b.frames) and (a.keep_from, a.keep_to) == (b.keep_from, b.keep_to)
        same = same and agree
        plan_first, plan_new = partial(first.plan, final), partial(new.plan, final)
        t_old, t_new = timed(plan_first, repeats, device), timed(plan_new, repeats, device)
        total_old, total_new = total_old + t_old, total_new + t_new
        if i in shown:
            print(f"| {i + 1} | {given} | {aten_ops(plan_first)} | {aten_ops(plan_new)} | "
                  f"{t_old * 1e6:.0f} us | {t_new * 1e6:.0f} us | {t_old / t_new:.2f}x | {'yes' if agree else 'NO (failure)'} |",
                  flush=True)
        wav = torch.zeros(a.frames.shape[-1] * HIFIGAN.output_hop_length, device=device)  # stand-in audio
        new.finish(a, wav)
        first.finish(b, wav)
    print(f"whole utterance ({codes} codes, {len(sizes)} chunks): planning {total_old * 1e3:.2f} ms the first way, "
          f"{total_new * 1e3:.2f} ms now, ratio {total_old / total_new:.2f}x; frames identical: {'yes' if same else 'NO'}",
          flush=True)
    return same


def voice_lookup(repeats: int) -> None:
    """The clip's bytes read and hashed (each lookup the first way) against a lookup now (its file unchanged)."""
    with tempfile.TemporaryDirectory(prefix="reader_host_work_") as tmp:
        folder = Path(tmp)
        shutil.copyfile(CLIP, folder / "spk1.flac")
        library = VoiceLibrary(folder=folder)
        voice = library.get("spk1")
        library.latents(voice, lambda path: ("latents",))
        device = torch.device("cpu")
        t_old = timed(lambda: hashlib.sha256(voice.path.read_bytes()).hexdigest(), repeats, device)
        t_new = timed(lambda: library.latents(voice, lambda path: ("latents",)), repeats, device)
        size = voice.path.stat().st_size
        print(f"voice lookup ({size / 1024:.0f} KB clip): read and hashed {t_old * 1e6:.0f} us, now {t_new * 1e6:.0f} us, "
              f"ratio {t_old / t_new:.2f}x", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--codes", type=int, default=400, help="latents in the utterance (about 21.5 per second)")
    parser.add_argument("--chunk", type=int, default=40, help="codes per chunk after the first 10 (serve's default)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(1)  # one reader's thread
    print(f"device {device}; {args.codes} latents of {DIM}; chunks of 10, then {args.chunk} codes; "
          f"{args.repeats} plans timed per chunk; one torch thread", flush=True)
    with torch.inference_mode():
        same = plans(args.codes, args.chunk, args.repeats, device)
    voice_lookup(args.repeats)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

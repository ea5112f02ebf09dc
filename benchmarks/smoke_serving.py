"""The GPU smoke test's serving section: the speech engine on the card, and HiFiGAN in half precision.

Imported by ``gpu_smoke.py`` (section 10); not a command of its own. The engine serves section 2's run
folder exactly as ``python -m xtts_ft serve --model RUN`` would (its best checkpoint on its base model):

- first-chunk latency and aggregate real-time factor at 1 and 8 concurrent streams (the reduced CPU mode:
  1 and 2 streams, pieces capped at a few codes), peak GPU memory on CUDA;
- on CUDA, HiFiGAN under fp16 and bf16 autocast against fp32 on the same latents: the largest sample
  difference and each one's time (whether half precision stays within tolerance of fp32 is a GPU
  measurement; a CPU prints that it was not measured);
- several callers' streamed windows vocoded one by one and in one call (``vocoder_windows.py``): 1, 8 and
  32 windows on CUDA, 2 short ones in the reduced CPU mode, with the kept audio checked the same;
- the decode step of the current decoder beside the first one and beside its CUDA-graph replay (the
  fixed-shape step run directly on the CPU), and prefill together beside one by one (``decode_step.py``):
  full-size random GPT at 1, 8 and 32 rows on CUDA, fp32 and bf16; a small GPT at 1 and 2 rows in the
  reduced CPU mode.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import numpy as np
import torch
from smoke_common import check, needs

VOICE = Path(__file__).resolve().parents[1] / "datasets" / "amharic_demo" / "wavs" / "spk1_001.flac"
TEXT = "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው። ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት።"  # two pieces (serve_load.py's text)


def _streams(engine, voice: str, clients: int, text: str) -> dict:
    """``clients`` callers synthesise ``text`` at once: first-audio times, audio seconds, wall time."""
    barrier = threading.Barrier(clients)
    firsts: list[float] = []
    audio: list[float] = []
    errors: list[str] = []

    def caller() -> None:
        try:
            barrier.wait()
            start = time.perf_counter()
            first, samples = None, 0
            for chunk in engine.synthesize(text, voice):
                if first is None and chunk.size:
                    first = time.perf_counter() - start
                samples += chunk.size
            firsts.append(first if first is not None else float("nan"))
            audio.append(samples / engine.sample_rate)
        except Exception as exc:  # noqa: BLE001 - reported as the section's result, not raised from a thread
            errors.append(f"{type(exc).__name__}: {exc}")

    started = time.perf_counter()
    pool = [threading.Thread(target=caller) for _ in range(clients)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return {"firsts": firsts, "audio_s": sum(audio), "wall_s": time.perf_counter() - started, "errors": errors,
            "every_stream_spoke": len(audio) == clients and min(audio, default=0.0) > 0}


def _half_precision_vocoder(engine, device: torch.device) -> None:
    from xtts_ft.inference.decoder_settings import DecoderSettings

    if device.type != "cuda":
        print("HiFiGAN fp16/bf16 vs fp32: not measured (no CUDA here; half precision is off on the CPU)", flush=True)
        return
    hifigan = engine.xtts.hifigan_decoder
    voice = engine.voices.get("demo_voice")
    _, speaker = engine._latents(voice)
    generator = torch.Generator(device=device).manual_seed(0)
    latents = torch.randn(1, 200, int(engine.xtts.args.decoder_input_dim), generator=generator, device=device)
    outputs = {}
    for name, dtype in (("fp32", None), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
        # the engine's own switch (ServeConfig.vocoder_precision): HiFiGAN under autocast in that dtype
        with torch.inference_mode(), DecoderSettings(vocoder=dtype).vocoding():
            hifigan(latents, g=speaker)  # warm-up (kernel choice)
            torch.cuda.synchronize(device)
            start = time.perf_counter()
            out = hifigan(latents, g=speaker).float()
            torch.cuda.synchronize(device)
        outputs[name] = (out, time.perf_counter() - start)
    ref = outputs["fp32"][0]
    for name in ("fp16", "bf16"):
        out, seconds = outputs[name]
        print(f"HiFiGAN {name} vs fp32 on 200 codes (~9.3 s of audio): max |diff| {(out - ref).abs().max().item():.2e} "
              f"(peak {ref.abs().max().item():.2f}), {seconds * 1000:.1f} ms against {outputs['fp32'][1] * 1000:.1f} ms",
              flush=True)
    check("HiFiGAN output is finite in fp16 and bf16", all(bool(torch.isfinite(o).all()) for o, _ in outputs.values()))


def serving_section(args, device: torch.device, state: dict) -> None:
    from xtts_ft.config import ServeConfig
    from xtts_ft.serve.engine import SpeechEngine
    from xtts_ft.serve.model_source import resolve_model

    needs(state, "cfg")
    run_dir = state["cfg"].run_dir
    cpu = device.type != "cuda"
    counts = (1, 2) if cpu else (1, 8)
    max_codes = 6 if cpu else 120  # a random GPT never says stop: each piece is capped
    text = TEXT if not cpu else TEXT.split("።")[0] + "።"  # the reduced mode speaks one piece
    voices = args.out / "serving_voices"  # one voice: a demo recording (the run's own speakers are offered too)
    voices.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(VOICE, voices / "demo_voice.flac")
    started = time.perf_counter()
    engine = SpeechEngine.open(resolve_model(run_dir), str(device), max_codes=max_codes, voices_dir=voices,
                               settings=ServeConfig(short_text_retries=0, stream_first_chunk_codes=min(
                                   ServeConfig.stream_first_chunk_codes, max_codes - 2)))
    try:
        voice = "demo_voice"
        print(f"engine on {device} in {time.perf_counter() - started:.1f} s ({engine.source.describe()}); voice {voice}; "
              f"pieces capped at {max_codes} codes; first chunk after {engine.settings.stream_first_chunk_codes} codes",
              flush=True)
        list(engine.synthesize(text[:12], voice))  # warm-up: the voice's latents, first-call costs
        spoke = True
        for clients in counts:
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            r = _streams(engine, voice, clients, text)
            firsts = np.array(r["firsts"] or [float("nan")])
            memory = (f"; peak GPU memory {torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB"
                      if device.type == "cuda" else "")
            print(f"{clients} stream(s): first audio p50 {np.percentile(firsts, 50) * 1000:.0f} ms, "
                  f"max {firsts.max() * 1000:.0f} ms; {r['audio_s']:.1f} s of audio in {r['wall_s']:.2f} s: "
                  f"{r['audio_s'] / r['wall_s']:.2f}x real time in aggregate (RTF {r['wall_s'] / max(r['audio_s'], 1e-9):.3f})"
                  f"{memory}{'; errors: ' + '; '.join(r['errors']) if r['errors'] else ''}", flush=True)
            spoke = spoke and r["every_stream_spoke"] and not r["errors"]
        check(f"the engine streamed audio to {' and '.join(map(str, counts))} concurrent callers", spoke)
        _half_precision_vocoder(engine, device)
        _vocoder_windows(engine, device)
    finally:
        engine.close()
    _decode_step(device)


def _vocoder_windows(engine, device: torch.device) -> None:
    """Several callers' streamed windows vocoded one by one and in one call (``vocoder_windows.py``): 1, 8 and 32
    windows on CUDA (where the engine gathers them, ``ServeConfig.vocoder_batch``), 2 short ones in the reduced CPU
    mode."""
    from vocoder_windows import compare

    cuda = device.type == "cuda"
    failures = (compare(engine.xtts.hifigan_decoder, [1, 8, 32], device) if cuda else
                compare(engine.xtts.hifigan_decoder, [2], device, repeats=1, window_frames=(20, 28)))
    check("windows vocoded in one call keep each window's own audio", failures == 0)


def _decode_step(device: torch.device) -> None:
    """The decoder's step beside the first decoder's (``decode_step.py``), on a random GPT of the real size on
    CUDA (fp32, and bf16 where the card has it), a small one in the reduced CPU mode."""
    from decode_step import compare

    from xtts_ft.train.precision import cuda_bf16_supported

    cuda = device.type == "cuda"
    precisions = ["fp32"] + (["bf16"] if cuda and cuda_bf16_supported(device) else [])
    failures = 0
    for precision in precisions:
        failures += compare("full" if cuda else "small", [1, 8, 32] if cuda else [1, 2], device, precision,
                            warmup=100 if cuda else 3, steps=20 if cuda else 2)
    check("the batched decoder gives the first decoder's codes, and prefill together the solo codes", failures == 0)

"""The speech engine under N concurrent callers, in process: the new engine, the old per-piece path, coqui's stream.

    python benchmarks/engine_load.py --size tiny --clients 1 8 32 --threads 1
    python benchmarks/engine_load.py --size full --clients 1 2 --paths engine per-piece --max-codes 20

Three paths over the same export (``serve_load.make_export``), the same two-sentence text and voice, each
piece capped at ``--max-codes`` audio codes (a random GPT never says stop):

- ``engine``: :class:`xtts_ft.serve.engine.SpeechEngine` (one decode thread batching every request,
  token-level streaming) with the eager decode step (serve's ``--decode-graphs off``);
- ``engine-graphs`` (CUDA): the same engine with its decode step and prefill replayed from CUDA graphs (serve's
  default on CUDA, ``--decode-graphs auto``), HiFiGAN on a CUDA stream of its own (``vocoder_stream: auto``);
- ``engine-graphs-one-stream`` (CUDA): the same with HiFiGAN on the decode steps' stream (``vocoder_stream: off``);
- ``per-piece``: the engine before issue 33: one lock, coqui's ``Xtts.inference`` per piece, a piece's audio
  when the whole piece is done;
- ``coqui-stream``: coqui's ``Xtts.inference_stream`` (``stream_chunk_size`` 20) per piece under the same lock
  (it stores the prefix on the model: one at a time), which re-vocodes everything so far at every chunk.

The old paths run on the engine's model, whose HiFiGAN weight norm the engine folds into plain weights (the
same audio; each vocoder call 10-17 % quicker on a CPU): coqui as shipped recomputes it at every call, so
those two rows are a little better than coqui's own.

Each (path, clients) pair runs in its own process, so its peak memory (``ru_maxrss``) is its own
(``--one-process``: one process runs every clients count and path in turn, the model loaded once and shared by
the paths, each engine path with a decode loop of its own: quicker, and its memory column is that process's peak
so far; the test's form). All callers start together
and each synthesises the text once (after the engine's own warm-up where serve runs it, on CUDA:
:mod:`xtts_ft.serve.warm_up`, and after ``--warmup-rounds`` untimed rounds of the same). Reported: time to
first audio p50/p95; the silence a caller would hear after its first audio, p95 and most over the callers (a
listener who plays each chunk as it comes, from the first: the waits for chunks that came after the audio before
them ran out); aggregate seconds of audio per second of wall time, peak resident memory; for the engine
paths also where the callers' first chunks spent their time (the medians of :mod:`xtts_ft.serve.first_chunk`'s
parts).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xtts_ft.serve.first_chunk import describe  # noqa: E402 (the standard library only: the parent stays light)

PATHS = ("engine", "per-piece", "coqui-stream", "engine-graphs", "engine-graphs-one-stream")
DEFAULT_PATHS = PATHS[:3]


def _engine(export: Path, voices: Path, max_codes: int, device: str, precision: str, max_active: int = 0,
            graphs: bool = False, vocoder_batch: int = 0, vocoder_stream: str = "auto", model_of=None):
    """An engine with the path's settings; ``model_of``: an engine whose loaded model (and voices) it shares, with a
    decode loop of its own (loading the full-size export again takes about a minute on a card)."""
    sys.path.insert(0, str(ROOT))
    from xtts_ft.config import ServeConfig
    from xtts_ft.serve.engine import SpeechEngine
    from xtts_ft.serve.model_source import resolve_model

    if precision == "default":  # what serve runs without the flags
        decode, vocoder = ServeConfig.decode_precision, ServeConfig.vocoder_precision
    else:  # the serve flags --decode-precision/--vocoder-precision
        decode = vocoder = "bf16" if device == "cuda" and precision == "bf16" else "fp32"
    settings = ServeConfig(short_text_retries=0, decode_precision=decode, vocoder_precision=vocoder,
                           max_active_streams=max_active or ServeConfig.max_active_streams,
                           decode_graphs="on" if graphs else "off", vocoder_stream=vocoder_stream,
                           vocoder_batch=vocoder_batch or ServeConfig.vocoder_batch)
    if model_of is not None:
        return SpeechEngine(model_of.xtts, model_of.tokenizer, model_of.meta, model_of.source, model_of.voices,
                            settings=settings, temperature=model_of.temperature, max_codes=max_codes)
    return SpeechEngine.open(resolve_model(export), device, voices_dir=voices, max_codes=max_codes, settings=settings)


def _old_path(engine, kind: str):
    """One caller of the per-piece lock path (coqui's inference, or its inference_stream): yields audio chunks."""
    import torch

    xtts = engine.xtts
    lock = threading.Lock()
    if "gpt_inference" not in xtts.gpt._modules:
        xtts.gpt.init_gpt_for_inference(kv_cache=True)

    def synthesize(text: str):
        latents = engine._latents(engine.voices.get("spk1"))
        for piece in engine.pieces(text):
            with lock, torch.inference_mode(), torch.random.fork_rng(devices=[]):
                xtts.gpt.max_gen_mel_tokens = engine.piece_cap(piece)
                torch.manual_seed(engine.settings.seed)
                if kind == "per-piece":
                    out = xtts.inference(piece, engine.language, *latents, temperature=engine.temperature)
                    yield np.asarray(out["wav"], dtype=np.float32).reshape(-1)
                else:
                    for chunk in xtts.inference_stream(piece, engine.language, *latents, stream_chunk_size=20,
                                                       temperature=engine.temperature):
                        yield chunk.cpu().numpy().astype(np.float32).reshape(-1)

    return synthesize


def _open(path: str, export: Path, voices: Path, max_codes: int, text: str, device: str, precision: str,
          max_active: int, vocoder_batch: int, model_of=None):
    """The engine for ``path`` (warmed up as serve does), the function one caller synthesises with, the warm-up's line.
    ``model_of``: an engine of an earlier path whose model this one shares (:func:`_engine`)."""
    from xtts_ft.serve.warm_up import wanted, warm_up

    engine = _engine(export, voices, max_codes, device, precision, max_active, graphs=path.startswith("engine-graphs"),
                     vocoder_batch=vocoder_batch, vocoder_stream="off" if path.endswith("one-stream") else "auto",
                     model_of=model_of)
    warmed = None
    if path.startswith("engine") and wanted(engine.settings.warm_up, engine.device.type):  # as serve does
        warmed = warm_up(engine).describe()
    synthesize = (lambda t: engine.synthesize(t, "spk1")) if path.startswith("engine") else _old_path(engine, path)
    list(synthesize(text[:20]))  # warm up (latents cached, first-call costs paid)
    return engine, synthesize, warmed


def _measure(engine, synthesize, path: str, clients: int, text: str, warmup_rounds: int,
             profile_dir: Path | None = None) -> dict:
    """``warmup_rounds`` untimed rounds, then the timed one, of ``clients`` callers starting together: the row.
    ``profile_dir``: the timed round under torch's profiler (:func:`_profiled`)."""
    import torch

    def one_round() -> tuple[list[tuple[float, float, float]], float]:
        """Every caller once, all starting together: (first audio s, audio s, silent gaps s) per caller, and the wall
        time."""
        barrier = threading.Barrier(clients)
        results: list[tuple[float, float, float]] = []

        def caller() -> None:
            barrier.wait()
            start = time.perf_counter()
            first, samples, arrivals = None, 0, []
            for chunk in synthesize(text):
                now = time.perf_counter()
                if first is None and chunk.size:
                    first = now - start
                if chunk.size:
                    arrivals.append((now, chunk.size / engine.sample_rate))
                samples += chunk.size
            results.append((first or float("nan"), samples / engine.sample_rate, silent_gaps(arrivals)))

        t0 = time.perf_counter()
        pool = [threading.Thread(target=caller) for _ in range(clients)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        return results, time.perf_counter() - t0

    new_engine = path.startswith("engine")
    for _ in range(warmup_rounds):  # a server that has run a while: its graphs recorded, its caches warm
        one_round()
    recorded_before = engine.loop.graph_recordings if new_engine else 0
    engine.vocoder_turns.largest = 0  # the timed round's largest call only
    engine.stats.first_chunks.clear()  # the timed round's first chunks only
    profile = None
    if profile_dir is None:
        results, wall = one_round()
    else:
        (results, wall), profile = _profiled(one_round, profile_dir / f"trace-{path}-x{clients}.json.gz", engine.device)
    firsts = np.array([r[0] for r in results])
    gaps = np.array([r[2] for r in results])
    audio = sum(r[1] for r in results)
    graphs = engine.loop.describe_graphs() if new_engine else None
    if graphs:
        graphs += f" ({engine.loop.graph_recordings - recorded_before} recorded in the timed round)"
    device = engine.device.type
    gpu_mb = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
    return {"path": path, "clients": clients, "ttfa_p50": float(np.percentile(firsts, 50)),
            "ttfa_p95": float(np.percentile(firsts, 95)), "gaps_p95": float(np.percentile(gaps, 95)),
            "gaps_max": float(gaps.max()), "audio_s": audio, "wall_s": wall,
            "audio_per_s": audio / wall, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "peak_gpu_mb": gpu_mb, "device": device, "max_active_streams": engine.settings.max_active_streams,
            "graphs": graphs, "warmup_rounds": warmup_rounds,
            "first_chunk_ms": {k: 1000 * v for k, v in engine.stats.first_chunks.medians().items()} if new_engine else {},
            "largest_vocoder_call": engine.vocoder_turns.largest if new_engine else None, "profile": profile,
            "engine_precision": engine.decoding.describe() if new_engine else None}


def silent_gaps(arrivals: list[tuple[float, float]]) -> float:
    """Seconds a listener who starts playing at the first chunk hears nothing before the end: each chunk
    (arrival time, seconds of audio) that arrives after the audio before it has run out adds the wait."""
    silent, runs_out = 0.0, None
    for arrived, seconds in arrivals:
        if runs_out is None or arrived > runs_out:
            silent += 0.0 if runs_out is None else arrived - runs_out
            runs_out = arrived
        runs_out += seconds
    return silent


def _profiled(fn, trace: Path, device) -> tuple[Any, dict]:
    """:func:`_profiled_round`; when the profiler itself fails, ``fn()`` again without it and the reason: on a card
    the row (and the larger clients counts after it, in the same process) matter more than the profile."""
    try:
        return _profiled_round(fn, trace, device)
    except RuntimeError as exc:
        return fn(), {"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}


def _profiled_round(fn, trace: Path, device) -> tuple[Any, dict]:
    """``fn()`` under torch's profiler (the CPU, and CUDA on a card): its result, and a summary: the operations
    that took the most time of their own (on the GPU on a card, else on the CPU) and, on a card, how much of the
    round's wall time the GPU was running a kernel (the union of the kernels' intervals). The whole trace is
    written to ``trace``, gzipped (Perfetto or chrome://tracing: each thread's calls beside the GPU's kernels)."""
    from torch._C._profiler import _ExperimentalConfig
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    try:  # every thread's operations (the decode loop's, the readers' vocoding), not only this one's (the default)
        every_thread = _ExperimentalConfig(profile_all_threads=True)
    except TypeError:  # a torch without the option: this thread's operations and the GPU's kernels
        every_thread = None
    with profile(activities=activities, experimental_config=every_thread) as prof:
        start = time.perf_counter()
        result = fn()
        wall = time.perf_counter() - start
    trace.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(trace))
    own = "self_device_time_total" if cuda else "self_cpu_time_total"
    top = sorted(prof.key_averages(), key=lambda e: getattr(e, own), reverse=True)[:12]
    summary: dict[str, Any] = {"trace": str(trace), "on": "GPU" if cuda else "CPU",
                               "top_ms": [[e.key, e.count, getattr(e, own) / 1000] for e in top]}
    if cuda:
        from torch.autograd import DeviceType

        spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type == DeviceType.CUDA)
        busy, reach = 0.0, float("-inf")
        for begin, end in spans:  # the union of the kernels' intervals (us)
            busy += max(0.0, end - max(begin, reach))
            reach = max(reach, end)
        summary["gpu_busy"] = busy / 1e6 / wall
    return result, summary


def worker(paths: list[str], clients: list[int], export: Path, voices: Path, max_codes: int, threads: int, text: str,
           device: str = "cpu", precision: str = "fp32", max_active: int = 0, vocoder_batch: int = 0,
           warmup_rounds: int = 0, profile_dir: Path | None = None, profile_clients: tuple[int, ...] = (1,)) -> None:
    """Print one JSON row per (clients, path), clients counts in turn and the paths of each in turn; each path's
    engine is opened (and warmed up) once, at its first row, and kept for the later clients counts; the first one
    loads the model, the others share it."""
    import torch

    torch.set_num_threads(threads)
    opened: dict[str, tuple] = {}
    try:
        for n in clients:
            for path in paths:
                first_row = path not in opened
                if first_row:  # the first path loads the model; the later ones share it (each its own loop)
                    shared = next(iter(opened.values()))[0] if opened else None
                    opened[path] = _open(path, export, voices, max_codes, text, device, precision, max_active,
                                         vocoder_batch, model_of=shared)
                engine, synthesize, warmed = opened[path]
                row = _measure(engine, synthesize, path, n, text, warmup_rounds,
                               profile_dir if n in profile_clients else None)
                row.update(precision=precision, warm_up=warmed if first_row else None)
                print(json.dumps(row), flush=True)
    finally:
        for engine, _, _ in opened.values():
            engine.close()


def run_all(export: Path, voices: Path, clients: list[int], paths: list[str], max_codes: int, threads: int,
            text: str, device: str = "cpu", precision: str = "fp32", one_process: bool = False,
            max_active: int = 0, vocoder_batch: int = 0, warmup_rounds: int = 0,
            profile_dir: Path | None = None, profile_clients: tuple[int, ...] = (1,),
            json_path: Path | None = None, build_size: str | None = None) -> list[dict]:
    """One child process per (path, clients) pair; ``one_process``: one child for all of them (quicker: each path's
    model is loaded once; its peak memory is then that process's peak so far). Each row is printed as the child
    gives it, and ``json_path`` written again with every row so far, so a run cut short keeps the rows it finished.
    ``build_size``: the (one) child writes the random export of that size at ``export`` itself first."""
    rows = []
    groups = [(paths, clients)] if one_process else [([path], [n]) for n in clients for path in paths]
    for group, counts in groups:
        cmd = [sys.executable, __file__, "--worker", *group, "--export", str(export), "--voices", str(voices),
               "--clients", *map(str, counts), "--max-codes", str(max_codes), "--threads", str(threads),
               "--text", text, "--device", device, "--precision", precision, "--max-active-streams", str(max_active),
               "--vocoder-batch", str(vocoder_batch), "--warmup-rounds", str(warmup_rounds)]
        if profile_dir:
            cmd += ["--profile", str(profile_dir.resolve()), "--profile-clients", *map(str, profile_clients)]
        if build_size:
            cmd += ["--size", build_size, "--build-export"]
        with tempfile.TemporaryFile("w+") as errors:  # a file, not a pipe: a chatty child never blocks on it
            with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, text=True, cwd=ROOT) as child:
                assert child.stdout is not None
                for line in child.stdout:  # the worker's rows: one JSON line each, as they finish
                    if line.startswith('{"path": '):
                        rows.append(_print_row(json.loads(line)))
                        if json_path is not None:
                            _write_json(json_path, rows)
            if child.returncode != 0:
                errors.seek(0)
                last = errors.read().strip().splitlines()[-3:]
                print(f"{','.join(group)} x{','.join(map(str, counts))}: failed: {last}", flush=True)
    return rows


def _write_json(path: Path, rows: list[dict]) -> None:
    """``rows`` as JSON at ``path``, replacing it in one rename (a reader never sees half a file)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    partial.replace(path)


def _print_row(row: dict[str, Any]) -> dict[str, Any]:
    """Print one worker row (its JSON line, parsed); return it."""
    path, n = row["path"], row["clients"]
    print(f"{path:>12} x{n:<3} first audio p50 {row['ttfa_p50']:.2f} s, p95 {row['ttfa_p95']:.2f} s; "
          f"silent after it p95 {row['gaps_p95']:.2f} s, max {row['gaps_max']:.2f} s; "
          f"{row['audio_per_s']:.2f} s of audio per s ({row['audio_s']:.1f} s in {row['wall_s']:.1f} s); "
          f"peak {row['peak_mb']:.0f} MB" + (f", GPU {row['peak_gpu_mb']:.0f} MB" if row["peak_gpu_mb"] else "")
          + (f"; graphs {row['graphs']}" if row.get("graphs") else "")
          + (f"; largest vocoder call {row['largest_vocoder_call']} chunks" if row.get("largest_vocoder_call") else ""),
          flush=True)
    if row.get("warm_up"):
        print(" " * 18 + row["warm_up"], flush=True)
    if row.get("first_chunk_ms"):
        print(" " * 18 + describe({k: v / 1000 for k, v in row["first_chunk_ms"].items()}), flush=True)
    profile = row.get("profile")
    if profile and "error" in profile:
        print(" " * 18 + f"profile failed ({profile['error']}); the row is from a round run again without it", flush=True)
    elif profile:
        busy = f"; the GPU ran kernels {100 * profile['gpu_busy']:.0f} % of the round" if "gpu_busy" in profile else ""
        print(" " * 18 + f"profile: {profile['trace']}{busy}; most {profile['on']} time of their own:", flush=True)
        for name, count, ms in profile["top_ms"]:
            print(" " * 20 + f"{ms:9.1f} ms  {count:6d} x  {name}", flush=True)
    return row


def main(argv: list[str] | None = None) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=["tiny", "full"], default="tiny")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--paths", nargs="+", choices=PATHS, default=list(DEFAULT_PATHS),
                   help="engine: the eager decode step (--decode-graphs off); engine-graphs: with CUDA graphs (CUDA); "
                        "engine-graphs-one-stream: and HiFiGAN on the decode steps' CUDA stream (vocoder_stream: off)")
    p.add_argument("--max-codes", type=int, default=40, help="Audio codes per piece at most (~21.5 per second).")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads per process.")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--precision", choices=["fp32", "bf16", "default"], default="fp32",
                   help="cuda only: bf16 = serve's --decode-precision bf16 --vocoder-precision bf16 (engine path); "
                        "default: serve's own defaults (ServeConfig's decode_precision and vocoder_precision)")
    p.add_argument("--max-active-streams", type=int, default=0,
                   help="the engine's batch bound (serve's --max-active-streams; 0: ServeConfig's default)")
    p.add_argument("--vocoder-batch", type=int, default=0,
                   help="chunks per HiFiGAN call on CUDA (serve's ServeConfig.vocoder_batch; 0: its default; the CPU "
                        "always vocodes one per call)")
    p.add_argument("--warmup-rounds", type=int, default=0,
                   help="untimed rounds of every caller before the timed one (a server that has run a while: the "
                        "graphs of engine-graphs recorded); 0: only one short warm-up request")
    p.add_argument("--json", type=Path, help="also write the rows as JSON here (again after each row)")
    p.add_argument("--profile", type=Path, metavar="DIR",
                   help="run each timed round under torch's profiler: its trace to DIR/trace-PATH-xN.json.gz, and under "
                        "the row the operations with the most time of their own (and, on a card, how busy the GPU was)")
    p.add_argument("--profile-clients", type=int, nargs="+", default=[1],
                   help="with --profile: the clients counts whose rounds are profiled (a trace of many callers is large)")
    p.add_argument("--one-process", action="store_true",
                   help="run every clients count and path in one process, in turn, the model loaded once for all paths "
                        "(quicker; the peak memory column is then that process's peak so far, not the path's own)")
    p.add_argument("--worker", nargs="+", choices=PATHS, help=argparse.SUPPRESS)
    p.add_argument("--export", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--voices", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--text", help=argparse.SUPPRESS)
    p.add_argument("--build-export", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        if args.build_export:
            from serve_load import make_export

            make_export(args.size, args.export.parent)
        worker(args.worker, args.clients, args.export, args.voices, args.max_codes, args.threads, args.text,
               args.device, args.precision, args.max_active_streams, args.vocoder_batch, args.warmup_rounds,
               args.profile, tuple(args.profile_clients))
        return
    if args.profile and args.profile.exists() and any(args.profile.glob("trace-*.json.gz")):
        # its traces have fixed names (trace-PATH-xN.json.gz): earlier ones there would be written over
        p.error(f"--profile {args.profile}: the folder holds traces already; give a folder without trace-*.json.gz")
    import soundfile as sf
    from serve_load import TEXT, VOICE, make_export

    with tempfile.TemporaryDirectory(prefix="engine_load_") as tmp:
        work = Path(tmp)
        # one process for every row: it writes the export itself (this process then never imports torch and coqui:
        # seconds of CPU, and on a card the full-size model is not built twice); otherwise every row's process reads it
        export = work / "export" if args.one_process else make_export(args.size, work)
        voices = work / "voices"
        voices.mkdir()
        data, sr = sf.read(VOICE)
        sf.write(voices / "spk1.wav", data, sr)
        print(f"{args.size} random export on {args.device} ({args.precision}); text of {len(TEXT)} characters (two "
              f"pieces); max {args.max_codes} codes per piece; {args.threads} torch thread(s) per process; "
              f"{args.warmup_rounds} untimed round(s) of every caller before the timed one"
              + ("; every clients count and path in one process (peak memory: that process's so far)"
                 if args.one_process else ""), flush=True)
        run_all(export, voices, args.clients, args.paths, args.max_codes, args.threads, TEXT, args.device,
                args.precision, args.one_process, args.max_active_streams, args.vocoder_batch,
                args.warmup_rounds, args.profile, tuple(args.profile_clients), args.json,
                args.size if args.one_process else None)


if __name__ == "__main__":
    main()

"""Benchmark: ``python -m xtts_ft serve`` under N concurrent clients on loopback, and coqui-tts's ``tts-server``.

    python benchmarks/serve_load.py                          # tiny random model, 8 clients x 2 requests
    python benchmarks/serve_load.py --size full --clients 4 --requests 1 --max-codes 60

Writes a random XTTS (``make-random-model --size tiny|full``) and exports it with the project's
export code (the base vocab plus an ``[am]`` token for tiny; the full random vocab has it), starts
the server as its own process (``--max-codes`` caps audio codes per piece: a random GPT never says
stop), then runs ``--clients`` threads at once, each sending ``--requests`` requests: even-numbered
clients stream (``pcm``, body read as it arrives), odd-numbered ones wait for a whole ``wav``.
Prints, per server: time to first audio byte and total latency (p50/p95), real-time factor
(latency / seconds of audio returned, p50; waiting for the one model included), throughput (seconds
of audio per second over all clients), requests per minute and errors.

Side by side, the same export under coqui-tts's own ``tts-server`` (its ``/v1/audio/speech``), once in
Amharic and once with ``--language_idx en``; whatever stops it is printed instead of numbers.

The engine alone, without HTTP, beside the old per-piece path and coqui's ``inference_stream`` at 1, 8
and 32 callers: ``benchmarks/engine_load.py`` (same export, text and voice).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
VOICE = ROOT / "datasets" / "amharic_demo" / "wavs" / "spk1_001.flac"
TEXT = "ዛሬ የአየሩ ሁኔታ በጣም ጥሩ ነው። ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ ሀገር ናት።"  # two pieces: streaming can start early


def make_export(size: str, work: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from tokenizers import Tokenizer

    from xtts_ft.base_model import BaseModelFiles
    from xtts_ft.evaluate.export import export_model
    from xtts_ft.layout import VOCAB_FILE
    from xtts_ft.model import build_xtts
    from xtts_ft.random_model import write_random_model
    from xtts_ft.text_settings import TextSettings
    from xtts_ft.tokenizer.voice_tokenizer import make_tokenizer

    base = BaseModelFiles.from_dir(write_random_model(work / "base", size=size, seed=0))
    vocab = work / VOCAB_FILE
    tok = Tokenizer.from_file(str(base.vocab_json))
    if tok.token_to_id("[am]") is None:
        tok.add_special_tokens(["[am]"])
    tok.save(str(vocab))
    settings = TextSettings(fold_homophones=False, char_limit=200)
    xtts = build_xtts(base, vocab, make_tokenizer(vocab, settings))
    out = export_model(base=base, vocab_path=vocab, gpt_state_dict=xtts.gpt.state_dict(), out_dir=work / "export",
                       text=settings, language="am")
    shutil.rmtree(work / "base")  # the full base is 2 GB: only the export is served
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str, proc: subprocess.Popen, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.5)
    raise RuntimeError(f"not answering {url} after {seconds:.0f} s")


def one_request(url: str, body: dict, stream: bool, headers: dict) -> dict:
    start = time.perf_counter()
    first = None
    data = b""
    try:
        with httpx.stream("POST", url, json=body, headers=headers, timeout=600) as r:
            for chunk in r.iter_bytes():
                if first is None and chunk:
                    first = time.perf_counter() - start
                data += chunk
            status = r.status_code
    except httpx.HTTPError as exc:
        return {"error": type(exc).__name__}
    total = time.perf_counter() - start
    if status != 200:
        return {"error": f"HTTP {status}: {data[:120]!r}"}
    if body["response_format"] == "pcm":
        seconds = len(data) / 2 / 24000
    else:
        seconds = sf.info(io.BytesIO(data)).duration
    return {"ttfb": first or total, "latency": total, "audio_s": seconds, "stream": stream}


def load(url: str, clients: int, requests: int, body: dict, headers: dict) -> list[dict]:
    results: list[dict] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        stream = i % 2 == 0
        for _ in range(requests):
            r = one_request(url, {**body, "response_format": "pcm" if stream else "wav"}, stream, headers)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    for r in results:
        r["wall"] = wall
    return results


def report(name: str, results: list[dict]) -> None:
    ok = [r for r in results if "error" not in r]
    errors = [r["error"] for r in results if "error" in r]
    if not ok:
        print(f"{name}: no request answered; errors: {sorted(set(errors))[:3]}")
        return
    pct = lambda key, q, rows=ok: float(np.percentile([r[key] for r in rows], q))  # noqa: E731
    streamed = [r for r in ok if r["stream"]]
    rtf = float(np.median([r["latency"] / r["audio_s"] for r in ok if r["audio_s"] > 0]))
    wall = ok[0]["wall"]
    audio_rate = sum(r["audio_s"] for r in ok) / wall  # throughput: seconds of speech per second, all clients
    line = (f"{name}: {len(ok)}/{len(results)} ok, errors {len(errors)}; latency p50 {pct('latency', 50):.2f} s "
            f"p95 {pct('latency', 95):.2f} s; RTF p50 {rtf:.2f} (queueing included); {audio_rate:.2f} s of audio per "
            f"second; {len(ok) / wall * 60:.1f} requests/min")
    if streamed:
        line += (f"; streamed first byte p50 {pct('ttfb', 50, streamed):.2f} s p95 {pct('ttfb', 95, streamed):.2f} s "
                 f"(whole stream p50 {pct('latency', 50, streamed):.2f} s)")
    print(line, flush=True)
    if errors:
        print(f"  errors: {sorted(set(errors))[:3]}")


def run_ours(export: Path, voices: Path, args) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "xtts_ft", "serve", "--model", str(export), "--voices", str(voices), "--port",
           str(port), "--device", "cpu", "--max-codes", str(args.max_codes)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_up(f"http://127.0.0.1:{port}/health", proc, 600)
        body = {"model": "tts-1", "voice": "spk1", "input": TEXT}
        report(f"xtts-ft serve ({args.size})", load(f"http://127.0.0.1:{port}/v1/audio/speech", args.clients,
                                                    args.requests, body, {}))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def run_coqui(export: Path, voices: Path, args, language: str) -> None:
    tts_server = shutil.which("tts-server")
    name = f"coqui tts-server ({args.size}, language {language}, {args.coqui_clients} clients x 1 request)"
    if tts_server is None:
        print(f"{name}: not installed (pip install coqui-tts)")
        return
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="tts-server-", suffix=".log", delete=False)
    cmd = [tts_server, "--model_path", str(export), "--config_path", str(export / "config.json"), "--port", str(port),
           "--language_idx", language]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        try:
            wait_up(f"http://127.0.0.1:{port}/", proc, 600)
        except RuntimeError as exc:
            tail = Path(log.name).read_text(errors="replace").strip().splitlines()[-1:] or ["(no output)"]
            print(f"{name}: does not start ({exc}): {tail[0][:200]}")
            return
        body = {"model": "tts-1", "voice": str(voices / "spk1.wav"), "input": TEXT if language == "am" else
                "The weather is very good today. Ethiopia is a country in East Africa."}
        results = load(f"http://127.0.0.1:{port}/v1/audio/speech", args.coqui_clients, 1, body, {})
        report(name, results)
        if any("error" in r for r in results):
            lines = [x for x in Path(log.name).read_text(errors="replace").splitlines() if "Error" in x]
            print(f"  its log: {lines[-1][:200] if lines else '(no error line)'}")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        os.unlink(log.name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=["tiny", "full"], default="tiny")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--requests", type=int, default=2, help="Requests per client, one after another.")
    p.add_argument("--max-codes", type=int, default=40, help="Audio codes per piece at most (~21.5 per second).")
    p.add_argument("--coqui-clients", type=int, default=2,
                   help="Clients (one request each) for tts-server: it cannot cap generation, so a random model runs "
                        "every request to the model's code limit.")
    p.add_argument("--no-coqui", action="store_true", help="Skip coqui-tts's tts-server.")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="serve_load_") as tmp:
        work = Path(tmp)
        t = time.perf_counter()
        export = make_export(args.size, work)
        voices = work / "voices"
        voices.mkdir()
        data, sr = sf.read(VOICE)
        sf.write(voices / "spk1.wav", data, sr)  # coqui's server takes only .wav voices
        print(f"{args.size} random export ready in {time.perf_counter() - t:.0f} s; {args.clients} clients x "
              f"{args.requests} requests; text of {len(TEXT)} characters; max {args.max_codes} codes per piece",
              flush=True)
        run_ours(export, voices, args)
        if not args.no_coqui:
            for language in ("am", "en"):
                run_coqui(export, voices, args, language)


if __name__ == "__main__":
    main()

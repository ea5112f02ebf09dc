"""``python -m xtts_ft serve --model PATH``: load the model once, then answer HTTP (and Wyoming) until stopped.

uvicorn runs the FastAPI app in this process's event loop; ``--wyoming tcp://HOST:PORT`` adds the
Wyoming server to the same loop and the same engine. The ports are taken before the model loads: one
that is in use (or not this machine's to take) is one ``error:`` line at once, not after seconds of
loading. Ctrl-C (or SIGTERM) stops both: every synthesis under way is cancelled at once (its answer ends
early; an SSE client is told), their threads are waited for, and the command ends with one line and exit
code 0. A second Ctrl-C forces uvicorn out.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Optional
from urllib.parse import urlparse

from xtts_ft.config.schema import AutoOff, AutoOffOn, DecodePrecision, ServeConfig, VocoderPrecision
from xtts_ft.errors import UserError
from xtts_ft.serve import warm_up
from xtts_ft.serve.chunk_pump import Generations
from xtts_ft.serve.engine import SpeechEngine
from xtts_ft.serve.http_app import create_app, uploads_note
from xtts_ft.serve.model_source import ResolvedModel, resolve_model
from xtts_ft.serve.wyoming_server import run_wyoming
from xtts_ft.speech_device import speech_device

if TYPE_CHECKING:  # uvicorn is imported where the server starts
    import uvicorn

log = logging.getLogger(__name__)

API_KEY_ENV = "XTTS_FT_API_KEY"
THREAD_JOIN_S = 30.0  # how long a stopping server waits for its cancelled syntheses (each ends within a layer)


class ServeError(UserError):
    """A ``serve`` option that cannot work."""


@dataclass
class ServeOptions:
    model: Path
    host: str = ServeConfig.host
    port: int = ServeConfig.port
    api_key: Optional[str] = None
    voices: Optional[Path] = None
    device: Optional[str] = None
    wyoming: Optional[str] = None
    base_model: Optional[str] = None
    max_codes: Optional[int] = None
    max_active_streams: int = ServeConfig.max_active_streams
    stream_first_chunk_codes: int = ServeConfig.stream_first_chunk_codes
    stream_chunk_codes: int = ServeConfig.stream_chunk_codes
    vocoder_batch: int = ServeConfig.vocoder_batch
    decode_precision: DecodePrecision = ServeConfig.decode_precision
    vocoder_precision: VocoderPrecision = ServeConfig.vocoder_precision
    decode_graphs: AutoOffOn = ServeConfig.decode_graphs
    vocoder_stream: AutoOff = ServeConfig.vocoder_stream
    decode_overlap: AutoOff = ServeConfig.decode_overlap
    warm_up: AutoOffOn = ServeConfig.warm_up

    def settings(self) -> ServeConfig:
        """The engine's settings: the schema's defaults with this command line's streaming and precision options."""
        for flag, value in (("--max-active-streams", self.max_active_streams),
                            ("--stream-first-chunk-codes", self.stream_first_chunk_codes),
                            ("--stream-chunk-codes", self.stream_chunk_codes), ("--vocoder-batch", self.vocoder_batch)):
            if value < 1:
                raise ServeError(f"{flag} {value}: must be 1 or more")
        return ServeConfig(host=self.host, port=self.port, max_active_streams=self.max_active_streams,
                           stream_first_chunk_codes=self.stream_first_chunk_codes,
                           stream_chunk_codes=self.stream_chunk_codes, vocoder_batch=self.vocoder_batch,
                           decode_precision=self.decode_precision,
                           vocoder_precision=self.vocoder_precision, decode_graphs=self.decode_graphs,
                           vocoder_stream=self.vocoder_stream, decode_overlap=self.decode_overlap, warm_up=self.warm_up)


def check_wyoming_uri(uri: str) -> str:
    parsed = urlparse(uri)
    if parsed.scheme != "tcp" or not parsed.hostname or not parsed.port:
        raise ServeError(f"--wyoming {uri}: give tcp://HOST:PORT, e.g. tcp://0.0.0.0:10200 (Home Assistant's default "
                         f"port for Wyoming TTS is 10200)")
    return uri


def bind_port(host: str, port: int, port_option: str, host_option: str) -> socket.socket:
    """A socket bound to ``host``:``port`` as uvicorn binds one (not listening yet: until the server starts, a
    client is refused as before), or a ``ServeError`` naming the option at fault when the address cannot be had."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            why = (f"{port_option}: {host}:{port} is in use (another server listens there); stop that one or choose "
                   f"another port")
        elif exc.errno == errno.EACCES:
            why = (f"{port_option}: port {port} is not open to this user (ports below 1024 need root); choose a port "
                   f"above 1023")
        elif isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            why = (f"{host_option}: {host} is no address of this machine; use 127.0.0.1 (this machine only) or "
                   f"0.0.0.0 (every network interface)")
        else:
            why = f"{port_option}: cannot listen on {host}:{port}: {exc.strerror or exc}"
        raise ServeError(why) from None
    sock.set_inheritable(True)
    return sock


def pick_device(device: Optional[str]) -> str:
    """``--device``: auto (CUDA when visible, else the CPU, also on a Mac), cpu, cuda[:N] or mps (xtts_ft/speech_device.py)."""
    return speech_device(device)


@dataclass(frozen=True)
class EngineChoice:
    """What ``serve`` loads, every part checked without loading anything (:func:`choose_engine`)."""

    settings: ServeConfig
    model: ResolvedModel
    device: str


def choose_engine(opts: ServeOptions) -> EngineChoice:
    """The options' settings, model folder and device, or the ``ServeError``/``UserError`` of the first that cannot
    work: all said before the ports are taken and the model loads."""
    if opts.max_codes is not None and opts.max_codes < 1:
        raise ServeError(f"--max-codes {opts.max_codes}: must be 1 or more")
    return EngineChoice(opts.settings(), resolve_model(opts.model, opts.base_model), pick_device(opts.device))


def load_engine(opts: ServeOptions, choice: EngineChoice) -> SpeechEngine:
    return SpeechEngine.open(choice.model, choice.device, voices_dir=opts.voices, max_codes=opts.max_codes,
                             settings=choice.settings)


def open_engine(opts: ServeOptions) -> SpeechEngine:
    return load_engine(opts, choose_engine(opts))


@dataclass
class StopReport:
    """How the server was stopped: the signal, and how many syntheses under way it cut short."""

    signal_name: Optional[str] = None
    cut_short: int = 0


def _stopping_server(config: uvicorn.Config, generations: Generations, report: StopReport) -> uvicorn.Server:
    """uvicorn's server, whose stop signal first cancels every synthesis under way; the signal is not raised
    again after the shutdown (uvicorn's own handler does that): a requested stop is a clean exit."""
    import uvicorn

    class StoppingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Optional[FrameType]) -> None:
            if self.should_exit:
                self.force_exit = sig == signal.SIGINT  # a second Ctrl-C: do not wait for connections
                return
            report.signal_name = signal.Signals(sig).name
            report.cut_short = generations.stop()
            self.should_exit = True

    return StoppingServer(config)


async def serve_forever(engine: SpeechEngine, opts: ServeOptions, generations: Optional[Generations] = None,
                        sockets: Optional[list[socket.socket]] = None) -> StopReport:
    """Serve until stopped; ``sockets``: the HTTP port, bound already (:func:`bind_port`; None: uvicorn binds it)."""
    import uvicorn

    generations = generations if generations is not None else Generations()
    report = StopReport()
    app = create_app(engine, api_key=opts.api_key, generations=generations)
    config = uvicorn.Config(app, host=opts.host, port=opts.port, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=5)
    server = _stopping_server(config, generations, report)
    tasks = [asyncio.ensure_future(server.serve(sockets=sockets))]
    if opts.wyoming:
        tasks.append(asyncio.ensure_future(run_wyoming(engine, opts.wyoming, generations=generations)))
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    generations.stop()  # uvicorn stopped (or Wyoming failed): nothing under way is wanted any more
    for task in pending:  # uvicorn stopped (Ctrl-C): the Wyoming server goes with it
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in done:
        task.result()
    return report


def serve_command(opts: ServeOptions) -> int:
    if opts.wyoming:
        check_wyoming_uri(opts.wyoming)
    if not 0 < opts.port < 65536:
        raise ServeError(f"--port {opts.port}: must be 1-65535")
    opts.api_key = opts.api_key or os.environ.get(API_KEY_ENV) or None
    if opts.host not in ("127.0.0.1", "localhost", "::1") and not opts.api_key:
        log.warning("listening on %s without --api-key: anyone who can reach this port can use the model", opts.host)
    choice = choose_engine(opts)
    if opts.wyoming:  # free now (Wyoming's server binds it itself when it starts; run_wyoming says if it is taken then)
        wyoming = urlparse(opts.wyoming)
        uri = f"--wyoming {opts.wyoming}"
        bind_port(str(wyoming.hostname), int(wyoming.port or 0), uri, uri).close()
    http = bind_port(opts.host, opts.port, f"--port {opts.port}", f"--host {opts.host}")  # kept: handed to uvicorn
    try:
        return _serve_on(http, opts, load_engine(opts, choice))
    finally:
        http.close()


def _serve_on(http: socket.socket, opts: ServeOptions, engine: SpeechEngine) -> int:
    if warm_up.wanted(engine.settings.warm_up, engine.device.type):
        log.info("%s", warm_up.warm_up(engine).describe())
    skipped = engine.voices.skipped
    print(f"serving {engine.source.describe()} on http://{opts.host}:{opts.port}/v1 "
          f"(voices: {', '.join(engine.voices.names()) or 'none yet: upload one'}"
          f"{f'; {len(skipped)} file(s) of --voices skipped, see above' if skipped else ''}; "
          f"uploaded voices are {uploads_note(engine.voices)})", flush=True)
    generations = Generations()
    report = asyncio.run(serve_forever(engine, opts, generations, sockets=[http]))
    if not generations.join(THREAD_JOIN_S):
        log.warning("a synthesis did not end within %.0f s of the stop", THREAD_JOIN_S)
    # the decode thread ends after its current step: a daemon thread left inside torch while the interpreter
    # shuts down is what aborted the process ("terminate called without an active exception")
    engine.close()
    cut = f"; {report.cut_short} request(s) being spoken were cut short" if report.cut_short else ""
    print(f"stopped ({report.signal_name or 'server ended'}){cut}", flush=True)
    return 0

"""The OpenAI-compatible HTTP API (FastAPI) over one :class:`~xtts_ft.serve.engine.SpeechEngine`.

* ``POST /v1/audio/speech``: OpenAI's fields (``model``, ``input``, ``voice``,
  ``response_format``, ``speed``, ``stream_format``) plus ``language`` (default: the model's).
  With ``stream_format: "audio"`` (OpenAI's default) the body is chunked audio, each piece sent as
  soon as it is synthesised (:mod:`.audio_formats` says which formats can go out early); with
  ``"sse"`` it is Server-Sent Events (``speech.audio.delta`` with base64 PCM/audio, then
  ``speech.audio.done``), as OpenAI defines them.
* ``GET /v1/models``, ``GET /v1/voices`` (also ``/v1/audio/voices``), ``POST /v1/voices``
  (multipart ``name`` + ``file``: a new voice from a clip), ``GET /health``.

Faults: every refusal is a 4xx JSON body in OpenAI's error shape (``{"error": {"message": ...,
"type": ..., "param": ..., "code": ...}}``) with one clear message and no traceback; an unexpected
failure is a 500 with one line (the traceback goes to the server log only). Requests beyond
``queue_size`` get 503 with ``Retry-After``. A client that goes away is noticed (the stream is
cancelled, or a watcher sees the disconnect) and its generation stops at the next decode step, while it
waits for the vocoder, or after the one chunk being vocoded; its place counts until then.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import threading
from functools import partial
from pathlib import Path
from typing import Annotated, AsyncIterator, Callable, Iterator, Mapping, Optional

import numpy as np
import numpy.typing as npt
from fastapi import APIRouter, Depends, FastAPI, File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from xtts_ft import __version__
from xtts_ft.config import ServeConfig
from xtts_ft.errors import UserError
from xtts_ft.json_types import JsonObject
from xtts_ft.serve.audio_formats import AudioFormat, StreamEncoder, available_formats, encode_whole
from xtts_ft.serve.chunk_pump import ChunkPump, Generations
from xtts_ft.serve.engine import SpeechEngine
from xtts_ft.serve.speech_request import ApiError, SpeechRequest, check_speech_request
from xtts_ft.serve.voices import VoiceLibrary

log = logging.getLogger(__name__)

MODEL_ID = "xtts-ft"
RETRY_AFTER_S = 2
JSON_OR_FORM = ("application/json", "multipart/form-data", "application/x-www-form-urlencoded")


def error_response(status: int, message: str, *, param: Optional[str] = None, kind: str = "invalid_request_error",
                   headers: Optional[Mapping[str, str]] = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": None}}
    return JSONResponse(body, status_code=status, headers=headers)


def uploads_note(voices: VoiceLibrary) -> str:
    """Where uploaded voices go, and whether they outlive the server (said at start, on upload, in /v1/voices)."""
    if voices.uploads_kept:
        return f"saved in {voices.folder}"
    return "kept only until the server stops (no --voices folder); start with --voices DIR to keep them"


class Admission:
    """At most ``limit`` requests admitted at once (being spoken or waiting for the model): :meth:`enter` gives a
    request its :class:`Place`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.admitted = 0
        self.refused = 0
        self._lock = threading.Lock()

    def enter(self) -> Place:
        with self._lock:
            if self.admitted >= self.limit:
                self.refused += 1
                raise ApiError(503, f"server busy: {self.limit} requests are already queued; retry in "
                                    f"{RETRY_AFTER_S} s", kind="server_busy", headers={"Retry-After": str(RETRY_AFTER_S)})
            self.admitted += 1
        return Place(self)

    def _leave(self) -> None:
        with self._lock:
            self.admitted -= 1


class Place:
    """One admitted request's place, given back when the last of its holders lets go: the answer (sent, cut off, or
    never started) holds it from the start, and its synthesis thread from its start to its end. A caller that hangs
    up ends the answer at once, but the thread may still be in a vocoder call: until that work has stopped it counts
    against the limit (it used to escape it)."""

    def __init__(self, admission: Admission) -> None:
        self._admission = admission
        self._holders = 1
        self._lock = threading.Lock()

    def hold(self) -> Callable[[], None]:
        """One more holder; what it calls when it lets go."""
        with self._lock:
            self._holders += 1
        return self.release

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            last = self._holders == 0
        if last:
            self._admission._leave()


def create_app(engine: SpeechEngine, *, settings: Optional[ServeConfig] = None, api_key: Optional[str] = None,
               generations: Optional[Generations] = None) -> FastAPI:
    """The app; ``generations``: the server's registry of syntheses under way (its ``stop`` ends them all)."""
    settings = settings or engine.settings
    formats = available_formats()
    admission = Admission(settings.queue_size)
    generations = generations if generations is not None else Generations()
    app = FastAPI(title="xtts-ft speech server", version=__version__, docs_url="/docs", redoc_url=None)
    app.state.engine, app.state.admission, app.state.formats = engine, admission, formats
    app.state.generations = generations

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, param=exc.param, kind=exc.kind, headers=exc.headers)

    @app.exception_handler(UserError)
    async def _user_error(_request: Request, exc: UserError) -> JSONResponse:
        return error_response(400, str(exc).splitlines()[0])

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = tuple(first.get("loc", ()))
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if loc[:1] == ("body",) and content_type not in JSON_OR_FORM:  # JSON sent as text/plain (curl -d, fetch)
            return error_response(400, f"request body: sent with Content-Type '{content_type or 'none'}'; send the "
                                       f"JSON with 'Content-Type: application/json'", param="content-type")
        where = ".".join(str(p) for p in loc if p != "body" and not isinstance(p, int)) or "request body"
        return error_response(400, f"{where}: {first.get('msg', 'invalid request')}", param=where)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected failure while answering a request")
        return error_response(500, f"internal error ({type(exc).__name__}); see the server log", kind="server_error")

    async def check_key(request: Request) -> None:
        if not api_key:
            return
        given = request.headers.get("authorization", "")
        token = given[7:] if given.lower().startswith("bearer ") else ""
        if not secrets.compare_digest(token.encode(), api_key.encode()):
            raise ApiError(401, "invalid API key: send 'Authorization: Bearer <the key the server was started with>'",
                           kind="invalid_api_key")

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(check_key)])

    # response_model=None: the return annotations below are for the type checker; FastAPI would otherwise make them
    # response models (validation, a schema) where these routes have always returned their dicts as they are
    @app.get("/health", response_model=None)
    async def health() -> JsonObject:
        s = engine.stats
        return {
            "status": "ok", "model": engine.source.describe(), "language": engine.language,
            "sample_rate": engine.sample_rate, "voices": len(engine.voices.names()),
            "voices_skipped": engine.voices.skipped, "uploads": uploads_note(engine.voices),
            "queue": {"admitted": admission.admitted, "limit": admission.limit, "refused": admission.refused},
            "stats": {"pieces": s.pieces, "cancelled": s.cancelled, "retries": s.retries, "capped": s.capped,
                      "synthesis_s": round(s.synthesis_s, 3), "audio_s": round(s.audio_s, 3)},
            "events": s.events[-5:],
        }

    @v1.get("/models", response_model=None)
    async def models() -> JsonObject:
        return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "owned_by": "xtts-ft",
                                            "language": engine.language, "source": engine.source.describe()}]}

    def voice_list() -> JsonObject:
        return {"voices": [{"id": v.name, "name": v.name, **v.to_json()} for v in engine.voices.list()],
                "uploads": uploads_note(engine.voices)}

    v1.get("/voices", response_model=None)(voice_list)
    v1.get("/audio/voices", response_model=None)(voice_list)

    @v1.post("/voices")
    async def add_voice(request: Request, name: Annotated[str, Form()],
                        file: Annotated[UploadFile, File()]) -> JSONResponse:
        limit = int(settings.max_upload_mb * 1024 * 1024)
        declared = int(request.headers.get("content-length") or 0)
        data = await file.read(limit + 1)
        if declared > limit + 64 * 1024 or len(data) > limit:
            raise ApiError(413, f"file: larger than {settings.max_upload_mb:g} MB; upload a 3-10 s clip", param="file")
        suffix = Path(file.filename or "clip.wav").suffix
        voice = await run_in_threadpool(partial(engine.voices.add, name, data, suffix, filename=file.filename))
        return JSONResponse({"id": voice.name, **voice.to_json(), "kept": uploads_note(engine.voices)},
                            status_code=201)

    @v1.post("/audio/speech")
    async def speech(body: SpeechRequest, request: Request) -> Response:
        fmt = check_speech_request(body, engine, formats, settings)
        if generations.stopping.is_set():
            raise ApiError(503, "the server is stopping; send the request to it again once it is back",
                           kind="server_stopping")
        place = admission.enter()
        try:
            pieces = engine.pieces(body.input, body.language)  # a UserError here is still a 400
            if not pieces:
                raise ApiError(400, "input: no speakable text (nothing is left after normalisation)", param="input")
            engine.voices.get(body.voice)
        except BaseException:
            place.release()
            raise
        cancel = threading.Event()
        chunks = engine.synthesize(body.input, body.voice, language=body.language, speed=body.speed,
                                   cancel=cancel.is_set)
        # Raw PCM has no header, so even one piece is sent as the engine decodes it (its first codes first); a
        # container of one piece (wav) stays a plain, complete file with its true length in the header.
        if body.stream_format == "sse" or (fmt.streams and (len(pieces) > 1 or fmt.sf_format is None)):
            def release() -> None:
                cancel.set()
                place.release()

            return AdmittedStream(_stream(chunks, fmt, body.stream_format, engine.sample_rate, cancel, generations, place),
                                  release=release,
                                  media_type="text/event-stream" if body.stream_format == "sse" else fmt.media_type)
        try:
            audio = await _collect(chunks, request, cancel, generations, place)
        finally:
            place.release()
        if audio is None:
            return Response(status_code=499)
        if generations.stopping.is_set():  # cut short by the stop: not the whole text, so no audio
            raise ApiError(503, "the server stopped while this request was being spoken; send it again once the "
                                "server is back", kind="server_stopping")
        return Response(encode_whole(audio, engine.sample_rate, fmt), media_type=fmt.media_type)

    app.include_router(v1)
    return app


class AdmittedStream(StreamingResponse):
    """A streamed answer that lets go of its :class:`Place` however it ends: sent, cancelled by a disconnect, or
    never started (a client gone before the first byte never runs the body generator, so its ``finally``
    cannot be relied on for this)."""

    def __init__(self, content: AsyncIterator[str | bytes], *, release: Callable[[], None], media_type: str) -> None:
        super().__init__(content, media_type=media_type)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


async def _collect(chunks: Iterator[npt.NDArray[np.float32]], request: Request, cancel: threading.Event,
                   generations: Generations, place: Place) -> Optional[npt.NDArray[np.float32]]:
    """All chunks, synthesised in a worker thread while the client's connection is watched; None if it went away.
    The thread holds ``place`` until it has ended."""
    parts: list[npt.NDArray[np.float32]] = []

    async def gather() -> None:
        async for chunk in ChunkPump(chunks, cancel, generations, on_end=place.hold()):
            parts.append(chunk)

    work = asyncio.ensure_future(gather())
    while not work.done():
        if await request.is_disconnected():
            work.cancel()
            return None
        await asyncio.wait({work}, timeout=0.25)
    work.result()
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


async def _stream(chunks: Iterator[npt.NDArray[np.float32]], fmt: AudioFormat, stream_format: str, sample_rate: int,
                  cancel: threading.Event, generations: Generations, place: Place) -> AsyncIterator[str | bytes]:
    """The response body; cancelled by the server when the client goes away, which stops the synthesis (whose
    thread holds ``place`` until it has ended).

    A server stop ends the synthesis too: the audio sent so far is closed off properly, and an SSE client
    gets an ``error`` event instead of ``speech.audio.done``, so it knows the text was not finished."""
    encoder = StreamEncoder(fmt, sample_rate)
    sent = 0
    try:
        async for chunk in ChunkPump(chunks, cancel, generations, on_end=place.hold()):
            data = encoder.piece(chunk)
            if data:
                sent += len(data)
                yield _sse_delta(data) if stream_format == "sse" else data
        tail = encoder.finish()
        if tail:
            sent += len(tail)
            yield _sse_delta(tail) if stream_format == "sse" else tail
        if stream_format == "sse" and generations.stopping.is_set():
            error = {"message": "the server stopped before the whole text was spoken", "type": "server_stopping"}
            yield "data: " + json.dumps({"type": "error", "error": error}) + "\n\n"
        elif stream_format == "sse":
            yield "data: " + json.dumps({"type": "speech.audio.done", "usage": {"output_bytes": sent}}) + "\n\n"
    finally:
        cancel.set()  # the client went away (or all was sent): nothing more to synthesise


def _sse_delta(data: bytes) -> str:
    return "data: " + json.dumps({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}) + "\n\n"

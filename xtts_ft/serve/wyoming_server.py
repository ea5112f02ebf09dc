"""The Wyoming protocol (Home Assistant's voice pipeline) on the same engine: ``serve --wyoming tcp://HOST:PORT``.

Uses the ``wyoming`` package's own server and event classes. ``Describe`` is answered with an
``Info`` listing the model as a TTS program and every voice; a ``Synthesize`` event is answered
with ``AudioStart``, one ``AudioChunk`` per spoken piece (16-bit mono PCM at the model's rate)
as each is ready, and ``AudioStop``. Home Assistant sends no language, so the model's own is
used; a voice it names that the server does not have falls back to the first voice (an
assistant should still speak). A request the HTTP server would refuse (empty, longer than
``serve.max_input_chars``, another script, no voice) is answered with a Wyoming ``Error`` event
and no audio events. A client that hangs up (Home Assistant does, routinely, once it has heard enough) stops
its synthesis within a vocoder call, with one log line and no traceback.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from functools import partial
from typing import TYPE_CHECKING, Optional

from xtts_ft import __version__
from xtts_ft.errors import UserError
from xtts_ft.serve.audio_formats import pcm16
from xtts_ft.serve.chunk_pump import ChunkPump, Generations
from xtts_ft.serve.engine import SpeechEngine
from xtts_ft.serve.speech_request import ApiError, check_input_length
from xtts_ft.serve.text_pieces import check_readable

if TYPE_CHECKING:  # imported where used: wyoming is needed only with --wyoming
    from wyoming.info import Info
    from wyoming.server import AsyncEventHandler

log = logging.getLogger(__name__)

ATTRIBUTION = ("xtts-ft (Coqui XTTS-v2 fine-tune)", "https://huggingface.co/coqui/XTTS-v2")


def wyoming_info(engine: SpeechEngine) -> Info:
    from wyoming.info import Attribution, Info, TtsProgram, TtsVoice

    attribution = Attribution(*ATTRIBUTION)
    voices = [TtsVoice(name=v.name, attribution=attribution, installed=True, description=f"{v.source} voice",
                       version=__version__, languages=[engine.language]) for v in engine.voices.list()]
    program = TtsProgram(name="xtts-ft", attribution=attribution, installed=True,
                         description="fine-tuned XTTS-v2 (" + engine.source.describe() + ")", version=__version__,
                         voices=voices)
    return Info(tts=[program])


def refusal_of(engine: SpeechEngine, text: str, voice: str, language: Optional[str]) -> Optional[str]:
    """Why a Synthesize request cannot be spoken (one line), by the HTTP server's rules; None when it can."""
    try:
        if not text.strip():
            return "text: empty; give the text to speak"
        check_input_length(text, engine.settings, "text")
        check_readable(text, language or engine.language, "text")
        if not engine.pieces(text, language):
            return "text: no speakable text (nothing is left after normalisation)"
        engine.voices.get(voice)
    except ApiError as exc:
        return exc.message
    except UserError as exc:
        return str(exc).splitlines()[0]
    return None


def make_handler_class(engine: SpeechEngine, generations: Optional[Generations] = None) -> type[AsyncEventHandler]:
    from wyoming.audio import AudioChunk, AudioStart, AudioStop
    from wyoming.error import Error
    from wyoming.event import Event
    from wyoming.info import Describe
    from wyoming.server import AsyncEventHandler
    from wyoming.tts import Synthesize

    class SpeechHandler(AsyncEventHandler):
        """One connection; each Synthesize is answered in full before the next event is read."""

        async def run(self) -> None:
            try:
                await super().run()
            except ConnectionError:  # reset while the next event was read: a hang-up, not a fault of ours
                log.info("Wyoming: a client's connection was reset")

        async def handle_event(self, event: Event) -> bool:
            if Describe.is_type(event.type):
                await self.write_event(wyoming_info(engine).event())
                return True
            if not Synthesize.is_type(event.type):
                return True
            request = Synthesize.from_event(event)
            voice_name = request.voice.name if request.voice and request.voice.name else None
            names = engine.voices.names()
            if voice_name not in names:
                voice_name = names[0] if names else "default"
            language = request.voice.language if request.voice and request.voice.language else None
            if language not in engine.languages:
                language = None  # Home Assistant sends none (or its own UI language): the model's
            refusal = await asyncio.to_thread(refusal_of, engine, request.text, voice_name, language)
            if refusal is not None:  # checked before AudioStart: the client gets an Error, not an empty stream
                await self.write_event(Error(text=refusal, code="bad-request").event())
                return True
            cancel = threading.Event()
            chunks = engine.synthesize(request.text, voice_name, language=language, cancel=cancel.is_set)
            rate = engine.sample_rate
            try:
                await self.write_event(AudioStart(rate=rate, width=2, channels=1).event())
                async for chunk in ChunkPump(chunks, cancel, generations):
                    await self.write_event(AudioChunk(rate=rate, width=2, channels=1, audio=pcm16(chunk)).event())
                await self.write_event(AudioStop().event())
            except UserError as exc:
                await self.write_event(Error(text=str(exc).splitlines()[0], code="bad-request").event())
            except ConnectionError:  # the client hung up mid-stream: its synthesis stops (finally), the connection ends
                log.info("Wyoming: the client hung up during the audio; its synthesis was stopped")
                return False
            finally:
                cancel.set()
            return True

    return SpeechHandler


async def run_wyoming(engine: SpeechEngine, uri: str, ready: Optional[asyncio.Event] = None,
                      generations: Optional[Generations] = None) -> None:
    """Serve ``uri`` (``tcp://HOST:PORT``) until cancelled; ``ready`` is set once connections are accepted.

    ``start`` rather than ``run``: ``run`` installs its own stop-signal handler, and Ctrl-C belongs to uvicorn,
    which cancels this task when it stops.
    """
    from wyoming.server import AsyncServer

    server = AsyncServer.from_uri(uri)
    try:
        await server.start(partial(make_handler_class(engine, generations)))
    except OSError as exc:  # (serve checks the port before loading the model; taken since by someone else)
        raise UserError(f"--wyoming {uri}: cannot listen there: {exc.strerror or exc}") from None
    log.info("Wyoming: listening on %s (language %s)", uri, engine.language)
    if ready is not None:
        ready.set()
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()

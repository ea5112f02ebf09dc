"""The body of ``POST /v1/audio/speech`` (OpenAI's fields, plus ``language``) and its checks.

The fields are loose on purpose (plain strings and numbers): every limit is checked here, so a
bad value gets one message that names the field, the value and what is accepted, in the same
words whatever the mistake, instead of a schema validator's list of errors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from pydantic import BaseModel, ConfigDict

from xtts_ft.config import ServeConfig
from xtts_ft.languages import canonical_language
from xtts_ft.serve.audio_formats import OPENAI_FORMATS, AudioFormat
from xtts_ft.serve.text_pieces import UnreadableText, check_readable
from xtts_ft.serve.voices import DEFAULT_VOICE, VoiceError, check_voice_name

if TYPE_CHECKING:  # (the engine imports torch; this module is the request's shape)
    from xtts_ft.serve.engine import SpeechEngine

SPEED_RANGE = (0.25, 4.0)  # OpenAI's
STREAM_FORMATS = ("audio", "sse")


class ApiError(Exception):
    """A refusal: HTTP status, one-line message, OpenAI error type and the offending parameter."""

    def __init__(self, status: int, message: str, *, param: Optional[str] = None, kind: str = "invalid_request_error",
                 headers: Optional[dict[str, str]] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.headers = status, message, param, kind, headers


# the Any mypy reports here is pydantic's (the __init__ its dataclass_transform declares), not one of these fields
class SpeechRequest(BaseModel):  # type: ignore[explicit-any]
    model_config = ConfigDict(extra="ignore")  # apps send fields of newer OpenAI models (instructions, ...)

    model: str = "xtts-ft"  # any name is accepted: apps send "tts-1"; there is one model
    input: str
    voice: str = DEFAULT_VOICE
    response_format: str = "mp3"  # OpenAI's default
    speed: float = 1.0
    stream_format: str = "audio"
    language: Optional[str] = None


def check_speech_request(body: SpeechRequest, engine: SpeechEngine, formats: dict[str, AudioFormat],
                         settings: ServeConfig) -> AudioFormat:
    """The output format; an ``ApiError`` (400) naming the first field that cannot be served."""
    if not body.input.strip():
        raise ApiError(400, "input: empty; give the text to speak", param="input")
    check_input_length(body.input, settings)
    fmt = formats.get(body.response_format)
    if fmt is None:
        why = "cannot be produced here" if body.response_format in OPENAI_FORMATS else "is not a format"
        raise ApiError(400, f"response_format {body.response_format!r}: {why}; this server can produce "
                            f"{', '.join(formats)}", param="response_format")
    if not SPEED_RANGE[0] <= body.speed <= SPEED_RANGE[1]:
        raise ApiError(400, f"speed {body.speed:g}: must be between {SPEED_RANGE[0]} and {SPEED_RANGE[1]}",
                       param="speed")
    if body.stream_format not in STREAM_FORMATS:
        raise ApiError(400, f"stream_format {body.stream_format!r}: use 'audio' or 'sse'", param="stream_format")
    if body.language is not None:
        body.language = canonical_language(body.language)  # 'amh', the code some tools use: one is stored
    if body.language is not None and body.language not in engine.languages:
        raise ApiError(400, f"language {body.language!r}: this model knows {', '.join(engine.languages)}; leave it "
                            f"out for {engine.language!r}", param="language")
    try:
        check_readable(body.input, body.language or engine.language, "input")
    except UnreadableText as exc:
        raise ApiError(400, str(exc), param="input") from None
    try:
        check_voice_name(body.voice)
        engine.voices.get(body.voice)
    except VoiceError as exc:
        raise ApiError(400, str(exc), param="voice") from None
    return fmt


def check_input_length(text: str, settings: ServeConfig, field: str = "input") -> None:
    """The one length limit of a request's text (HTTP and Wyoming): ``ServeConfig.max_input_chars``."""
    if len(text) > settings.max_input_chars:
        raise ApiError(400, f"{field}: {len(text)} characters; at most {settings.max_input_chars} per request "
                            f"(split the text into several requests)", param=field)

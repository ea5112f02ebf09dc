"""What the Speak tab does, without Gradio: models to choose, voices, the text the model reads, synthesis.

Synthesis uses the ONE engine the server and Wyoming use (:class:`xtts_ft.serve.engine.SpeechEngine`
on :func:`xtts_ft.serve.model_source.resolve_model`): the same loading, text front-end, sentence
splitting and short-text mitigation. :class:`EngineHolder` keeps one engine open (models are large)
and opens another when the model or the settings change. A voice clip (a dataset clip or an
upload) becomes an engine voice named after its content, so the same clip is conditioned once.
"""

from __future__ import annotations

import csv
import hashlib
import json
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import soundfile as sf
import torch

from xtts_ft.config import ServeConfig
from xtts_ft.errors import DataError, ModelError
from xtts_ft.inference.checkpoint_folder import checkpoint_settings
from xtts_ft.languages import AMHARIC
from xtts_ft.layout import RunLayout
from xtts_ft.model_folder import EXPORT_META
from xtts_ft.serve.engine import SpeechEngine
from xtts_ft.serve.model_source import resolve_model
from xtts_ft.serve.text_pieces import check_readable
from xtts_ft.tempfiles import atomic_write
from xtts_ft.text import normalize_text
from xtts_ft.text_settings import TextSettings
from xtts_ft.webapp import run_view

MAX_VOICES = 20


def model_choices(run_dir: Path) -> list[tuple[str, str]]:
    """(label, folder) of the run's exports and checkpoints, newest first; the best checkpoint marked."""
    best = run_view.best_step(run_dir)
    out = [(f"export {p.name}", str(p)) for p in reversed(run_view.exports(run_dir))]
    for path in reversed(run_view.checkpoints(run_dir)):
        step = int(path.name.split("_")[1])
        out.append((f"checkpoint {path.name}" + (" ★ best" if step == best else ""), str(path)))
    return out


def voice_choices(run_dir: Path) -> list[tuple[str, str]]:
    """(label, clip) for the prepared evaluation clips of the run's dataset: one per speaker first, then more."""
    layout = RunLayout(run_dir)
    rows: list[tuple[str, Path]] = []
    for csv_path in (layout.eval_csv, layout.train_csv):
        if not csv_path.is_file():
            continue
        with open(csv_path, encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f, delimiter="|"):
                if row.get("audio_file"):
                    rows.append((row.get("speaker_name") or "speaker", layout.data / row["audio_file"]))
    seen: Counter[str] = Counter()  # clips offered so far per speaker
    firsts: list[tuple[str, str]] = []  # (label, path): each speaker's first clip, then the others
    rest: list[tuple[str, str]] = []
    for speaker, path in rows:
        (firsts if not seen[speaker] else rest).append((f"{speaker}: {path.name}", str(path)))
        seen[speaker] += 1
    return (firsts + rest)[:MAX_VOICES]


def text_settings(model: Path) -> TextSettings:
    """The text front-end settings the model was trained with (a checkpoint's config.yaml, an export's meta)."""
    meta = Path(model) / EXPORT_META
    if meta.is_file():
        data = json.loads(meta.read_text(encoding="utf-8"))
        return TextSettings.from_dict(data.get("text"), str(meta), ModelError)
    settings: TextSettings = checkpoint_settings(Path(model))["text"]
    return settings


def text_limit(run_dir: Path) -> int:
    """The longest text Speak reads: the server's limit, ``serve.max_input_chars`` of the run's config (the
    schema's default when the run has none yet)."""
    serve = run_view.run_config(Path(run_dir)).get("serve")
    value = serve.get("max_input_chars") if isinstance(serve, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else ServeConfig.max_input_chars


def reading(text: str, settings: TextSettings, max_chars: Optional[int] = None) -> str:
    """What the model will read for ``text`` (numbers as words, punctuation mapped); refuses a wrong script,
    and text longer than ``max_chars`` (see :func:`text_limit`).

    The rule is the servers' (:func:`xtts_ft.serve.text_pieces.check_readable`): letters of another script
    or symbols such as emoji, which the normaliser would drop silently, are refused in one line naming them.
    """
    if max_chars is not None and len(text) > max_chars:
        raise DataError(f"text: {len(text)} characters; at most {max_chars} at a time (serve.max_input_chars, the "
                        f"server's limit too): speak it in several parts")
    check_readable(text, AMHARIC, "text")
    result = normalize_text(text, fold_homophones=settings.fold_homophones)
    if not text.strip():
        raise DataError("text: empty; type the text to speak")
    if not result.text:
        raise DataError("text: nothing the model can read is left after normalisation; type Amharic words")
    return result.text


@dataclass(frozen=True)
class SpeakSettings:
    temperature: float
    max_codes: Optional[int]  # audio codes per piece at most (about 21.5 per second); None: the model's limit


# One listener: a piece and the next one decoding ahead of it; so on a card the decode cache that CUDA graphs lay
# out once holds 2 rows (about 0.6 GB for XTTS-v2 in fp32), not the server's 16, beside a training run.
SPEAK_ENGINE = ServeConfig(max_active_streams=2)


class EngineHolder:
    """One open :class:`SpeechEngine`, for one (model, settings) at a time."""

    def __init__(self, device: Optional[str] = None) -> None:
        self.device = device  # as ui --device resolved it (xtts_ft/speech_device.py); None: CUDA if visible, else CPU
        self._lock = threading.Lock()
        self._key: Optional[tuple[str, SpeakSettings]] = None  # (model folder, settings) the engine was opened for
        self._engine: Optional[SpeechEngine] = None

    def get(self, model: Path, settings: SpeakSettings) -> SpeechEngine:
        key = (str(Path(model).resolve()), settings)
        with self._lock:
            if key != self._key:
                if self._engine is not None:  # the old model goes before the new one loads: its decode thread
                    self._engine.close()  # holds it, so dropping the engine alone kept its memory
                self._engine, self._key = None, None
                device = self.device or ("cuda" if torch_cuda_available() else "cpu")
                self._engine = SpeechEngine.open(resolve_model(model), device, temperature=settings.temperature,
                                                 max_codes=settings.max_codes, settings=SPEAK_ENGINE)
                self._key = key
            assert self._engine is not None  # opened above unless it was already open for this key
            return self._engine


def torch_cuda_available() -> bool:
    available: bool = torch.cuda.is_available()
    return available


def voice_name(engine: SpeechEngine, clip: Path) -> str:
    """The engine voice for ``clip``, added on first use under a name made from its content."""
    data = Path(clip).read_bytes()
    name = "clip-" + hashlib.sha256(data).hexdigest()[:12]
    if name not in engine.voices.names():
        engine.voices.add(name, data, suffix=Path(clip).suffix or ".wav", filename=Path(clip).name)
    return name


def speak(holder: EngineHolder, model: Path, text: str, clip: Path, out: Path, settings: SpeakSettings,
          max_chars: Optional[int] = None) -> Path:
    """Synthesise ``text`` with ``model`` (an export, a checkpoint or a run folder) in the voice of ``clip``;
    text longer than ``max_chars`` is refused (see :func:`text_limit`)."""
    if not Path(clip).is_file():
        raise DataError(f"voice: '{clip}' not found; choose a dataset clip or upload one")
    reading(text, text_settings(Path(model)), max_chars)  # a wrong script or a too long text: before the model loads
    engine = holder.get(Path(model), settings)
    audio = engine.synthesize_all(text, voice_name(engine, Path(clip)))
    atomic_write(Path(out), lambda f: sf.write(f, audio, engine.sample_rate, format="WAV"))
    return Path(out)

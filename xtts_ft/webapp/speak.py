"""What the Speak tab does, without Gradio: models to choose, voices, the text the model reads, synthesis.

Synthesis goes through ONE function, :func:`speak`, on the project's own inference path
(:func:`xtts_ft.evaluate.infer.synthesize_command`: the export or checkpoint loaded the way
``python -m xtts_ft synthesize`` loads it, the same tokenizer and text settings the run trained
with). The serve helper's engine (``xtts_ft/serve/engine.py``) was not ready when this tab was
written; :func:`speak` is the one place to switch to it.
"""

from __future__ import annotations

import csv
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from xtts_ft.errors import DataError
from xtts_ft.layout import RunLayout
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
    seen: Counter = Counter()
    firsts, rest = [], []
    for speaker, path in rows:
        (firsts if not seen[speaker] else rest).append((f"{speaker}: {path.name}", str(path)))
        seen[speaker] += 1
    return (firsts + rest)[:MAX_VOICES]


def text_settings(model: Path) -> TextSettings:
    """The text front-end settings the model was trained with (a checkpoint's config.yaml, an export's meta)."""
    import json

    from xtts_ft.errors import ModelError
    from xtts_ft.evaluate.export import EXPORT_META, checkpoint_settings

    meta = Path(model) / EXPORT_META
    if meta.is_file():
        data = json.loads(meta.read_text(encoding="utf-8"))
        return TextSettings.from_dict(data.get("text"), str(meta), ModelError)
    return checkpoint_settings(Path(model))["text"]


def _script_of(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return name.split(" ")[0].title() if name else "unknown"


def reading(text: str, settings: TextSettings) -> str:
    """What the model will read for ``text`` (numbers as words, punctuation mapped); refuses a wrong script.

    The normaliser keeps Ethiopic (and Latin) letters; letters of any other script would be dropped
    silently, so they are refused in one line that names them.
    """
    result = normalize_text(text, fold_homophones=settings.fold_homophones)
    foreign = [ch for ch in result.dropped if unicodedata.category(ch).startswith("L")]
    if foreign:
        scripts = ", ".join(sorted({_script_of(ch) for ch in foreign}))
        sample = "".join(foreign)[:12]
        raise DataError(f"text: letters in a script the model does not read ({scripts}: '{sample}'); "
                        f"write the text in Amharic (Ethiopic script)")
    if not text.strip():
        raise DataError("text: empty; type the text to speak")
    if not result.text:
        raise DataError("text: nothing the model can read is left after normalisation; type Amharic words")
    return result.text


@dataclass
class SpeakSettings:
    temperature: float
    seed: int
    max_new_tokens: Optional[int]


def speak(model: Path, text: str, voice: Path, out: Path, settings: SpeakSettings) -> Path:
    """Synthesise ``text`` with ``model`` (an export or a checkpoint folder) in the voice of ``voice`` to ``out``."""
    from xtts_ft.evaluate.infer import synthesize_command
    from xtts_ft.evaluate.standalone import base_for_checkpoint
    from xtts_ft.layout import STATE_FILE

    model = Path(model)
    reading(text, text_settings(model))  # a wrong script is refused before the model loads
    base = base_for_checkpoint(model, None) if (model / STATE_FILE).is_file() else None
    return synthesize_command(model, text, Path(voice), Path(out), base=base, temperature=settings.temperature,
                              seed=settings.seed, max_new_tokens=settings.max_new_tokens)

"""The README.md written into an export folder: how to load it with stock coqui-tts.

The three lines that plug in the project's tokenizer are built by :func:`tokenizer_lines`, and
the tests run exactly those lines against a real export, so the README cannot drift from what
works.
"""

from __future__ import annotations

from pathlib import Path

from xtts_ft.json_types import JsonMapping
from xtts_ft.layout import VOCAB_FILE
from xtts_ft.model_folder import CONFIG_JSON

TOKENIZER_IMPORT = "from xtts_ft.tokenizer import AmharicTokenizer"
EXAMPLE_TEXT = "ሰላም፣ እንዴት ነህ?"


def tokenizer_lines(export_dir: Path, meta: JsonMapping) -> list[str]:
    """Import the tokenizer, plug it into the loaded model, synthesise (text front-end settings of the run)."""
    text = meta["text"]  # always written by export_model
    args = [
        repr(str(Path(export_dir) / VOCAB_FILE)),
        f"fold_homophones={bool(text['fold_homophones'])}",
        f"char_limit={int(text['char_limit'])}",
    ]
    language = meta["language"]
    return [
        TOKENIZER_IMPORT,
        f"model.tokenizer = AmharicTokenizer({', '.join(args)})",
        f'out = model.synthesize({EXAMPLE_TEXT!r}, speaker_wav="voice.wav", language={language!r})',
    ]


def export_readme(export_dir: Path, meta: JsonMapping) -> str:
    d = str(export_dir)
    step = meta.get("step")
    source = meta.get("source_checkpoint") or "an in-memory model"
    lines = tokenizer_lines(export_dir, meta)
    return f"""# XTTS-v2 fine-tuned for '{meta["language"]}' (xtts_ft)

Exported from {source}{f" at step {step}" if step is not None else ""}; vocabulary fingerprint
`{meta.get("vocab_fingerprint")}`, {meta.get("text_tokens")} text tokens. Base model: `{meta.get("base_model")}`.

Stock coqui-tts loads this folder. Paths below are where the folder was written; change them if
you move it.

```python
from TTS.tts.configs.xtts_config import XttsConfig
from TTS.tts.models.xtts import Xtts

config = XttsConfig()
config.load_json({str(Path(d) / CONFIG_JSON)!r})
model = Xtts.init_from_config(config)
model.load_checkpoint(config, checkpoint_dir={d!r}, eval=True)
```

Stock coqui cannot normalise Amharic text (numbers, abbreviations, punctuation), so plug in the
project's tokenizer; it encodes with the same `vocab.json` and normalises like the training data:

```python
{chr(10).join(lines)}
```

`out["wav"]` is the waveform at 24 kHz (`soundfile.write("out.wav", out["wav"], 24000)`).

Files: `model.pth` (`{{"model": state_dict}}`, no optimizer, no DVAE), `config.json`, `vocab.json`
(the extended vocabulary), `mel_stats.pth`, `speakers_xtts.pth` (when the base model has it),
`xtts_ft_meta.json` (fingerprint, source checkpoint, step, text front-end settings).
"""

"""The files of a model folder in the coqui/XTTS-v2 layout, defined once.

Three kinds of folder share this layout: a base model (``coqui/XTTS-v2`` or a local copy), a
random model the project writes (:mod:`xtts_ft.random_model`), and an export
(:mod:`xtts_ft.evaluate.export`). An export is a complete model folder: it also carries the
DVAE and mel statistics of its base, so it can itself be the base of a further fine-tune (a new
speaker on top of an Amharic model). What an export adds is its
``xtts_ft_meta.json``; what lets a front end load a folder as an export is ``model.pth`` + ``config.json``
(:func:`is_export`).

::

    <model folder>/        ModelFolder
      config.json  model.pth  vocab.json  dvae.pth  mel_stats.pth  [speakers_xtts.pth]
      xtts_ft_meta.json  README.md        (an export only)
"""

from __future__ import annotations

from pathlib import Path

from xtts_ft.layout import DVAE_FILE, VOCAB_FILE

CONFIG_JSON = "config.json"
MODEL_FILE = "model.pth"
MEL_STATS_FILE = "mel_stats.pth"
SPEAKERS_FILE = "speakers_xtts.pth"
EXPORT_META = "xtts_ft_meta.json"  # what this project adds to an export: language, text settings, source
EXPORT_README = "README.md"

#: What a base model must hold: the fine-tune needs the DVAE (target audio codes) and the mel statistics.
REQUIRED_FILES = (CONFIG_JSON, MODEL_FILE, VOCAB_FILE, DVAE_FILE, MEL_STATS_FILE)
#: Present in coqui/XTTS-v2 (the built-in speakers); a model works without it.
OPTIONAL_FILES = (SPEAKERS_FILE,)
#: What makes a folder an export (loaded for synthesis with stock ``Xtts.load_checkpoint(config, checkpoint_dir=...)``)
#: rather than a training checkpoint folder; older exports and base models pass too, and load the same way.
EXPORT_FILES = (MODEL_FILE, CONFIG_JSON)


class ModelFolder:
    """Paths of one model folder; nothing is read until asked."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"ModelFolder({str(self.root)!r})"

    config_json = property(lambda self: self.root / CONFIG_JSON)
    model = property(lambda self: self.root / MODEL_FILE)
    vocab = property(lambda self: self.root / VOCAB_FILE)
    dvae = property(lambda self: self.root / DVAE_FILE)
    mel_stats = property(lambda self: self.root / MEL_STATS_FILE)
    speakers = property(lambda self: self.root / SPEAKERS_FILE)
    export_meta = property(lambda self: self.root / EXPORT_META)
    readme = property(lambda self: self.root / EXPORT_README)

    def missing(self) -> list[str]:
        """The required files (``REQUIRED_FILES``) this folder lacks."""
        return [name for name in REQUIRED_FILES if not (self.root / name).is_file()]

    def is_export(self) -> bool:
        """Loadable as an export: ``model.pth`` + ``config.json`` (``xtts_ft_meta.json`` is optional: older exports)."""
        return all((self.root / name).is_file() for name in EXPORT_FILES)


def is_export(folder: str | Path) -> bool:
    """The one answer to "is this folder an export?" (see ``ModelFolder.is_export``)."""
    return ModelFolder(folder).is_export()

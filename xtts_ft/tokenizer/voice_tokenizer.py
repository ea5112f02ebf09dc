"""coqui's VoiceBpeTokenizer taught Amharic, by subclassing (no patching of coqui).

Stock ``VoiceBpeTokenizer.preprocess_text`` raises NotImplementedError for any language it
does not know, and its ``char_limits`` table is an instance attribute. This subclass adds
'am' (and the alias 'amh') with the project's own normaliser and a sentence-splitting limit,
and leaves every other language to coqui unchanged.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

from TTS.tts.layers.xtts.tokenizer import VoiceBpeTokenizer

AMHARIC_CODES = ("am", "amh")


def _default_normalizer(fold_homophones: bool) -> Callable[[str], str]:
    from xtts_ft.text import normalize_text

    return lambda text: normalize_text(text, fold_homophones=fold_homophones).text


class AmharicTokenizer(VoiceBpeTokenizer):
    """A VoiceBpeTokenizer that also encodes Amharic ('am' / 'amh') with the extended vocab."""

    def __init__(
        self,
        vocab_file: str | os.PathLike[Any] | None = None,
        *,
        char_limit: int = 200,
        fold_homophones: bool = False,
        normalizer: Optional[Callable[[str], str]] = None,
    ):
        super().__init__(vocab_file)
        self.char_limits["am"] = char_limit
        self._normalize = normalizer or _default_normalizer(fold_homophones)

    def preprocess_text(self, txt: str, lang: str) -> str:
        if lang in AMHARIC_CODES:
            return self._normalize(txt)
        return super().preprocess_text(txt, lang)

    def encode(self, txt: str, lang: str) -> list[int]:
        return super().encode(txt, "am" if lang == "amh" else lang)

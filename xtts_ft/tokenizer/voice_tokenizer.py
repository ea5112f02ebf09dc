"""coqui's VoiceBpeTokenizer taught Amharic, by subclassing (no patching of coqui).

Stock ``VoiceBpeTokenizer.preprocess_text`` raises NotImplementedError for any language it
does not know, and its ``char_limits`` table is an instance attribute. This subclass adds
'am' (and the alias 'amh', encoded as 'am') with the project's own normaliser and a
sentence-splitting limit, and leaves every other language to coqui unchanged.

Differences from the parent, all deliberate:
- 'amh' is accepted wherever 'am' is (``encode``, ``char_limits``); both give the same ids.
- Encoding Amharic with a vocabulary that has no ``[am]`` token raises TokenizerError instead of
  silently spelling "[am]" as the four tokens "[", "am", "]" (the base XTTS vocab has no [am]).
- ``decode`` also drops language tokens and [START], so ``decode(encode(x, lang)) == preprocessed x``.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, Optional, Union

import torch
from TTS.tts.layers.xtts.tokenizer import VoiceBpeTokenizer

from xtts_ft.errors import TokenizerError
from xtts_ft.languages import AMHARIC, aliases_of, canonical_language
from xtts_ft.text_settings import TextSettings, make_normalizer
from xtts_ft.tokenizer.vocab_file import load_tokenizer

AMHARIC_CODES = aliases_of(AMHARIC)


class AmharicTokenizer(VoiceBpeTokenizer):
    """A VoiceBpeTokenizer that also encodes Amharic ('am' / 'amh') with the extended vocab.

    ``normalizer`` turns raw Amharic text into what the vocabulary was trained on; it must be the
    one given to ``build_extended_vocab``. Default: the project's ``xtts_ft.text.normalize_text`` with
    ``fold_homophones`` (imported on first Amharic use, so English-only use works without it).
    ``char_limit`` and ``fold_homophones`` have no defaults here: build it with
    :func:`make_tokenizer` from the run's config or the export's settings.
    """

    def __init__(
        self,
        vocab_file: str | os.PathLike[str] | None = None,
        *,
        char_limit: int,
        fold_homophones: bool,
        normalizer: Optional[Callable[[str], str]] = None,
    ) -> None:
        self.vocab_file = vocab_file
        if vocab_file is not None:
            load_tokenizer(vocab_file)  # a missing or broken file becomes a one-line TokenizerError
        super().__init__(vocab_file)
        for code in AMHARIC_CODES:
            self.char_limits[code] = char_limit
        self._fold_homophones = fold_homophones
        self._normalize = normalizer

    def preprocess_text(self, txt: str, lang: str) -> str:
        if lang in AMHARIC_CODES:
            if self._normalize is None:
                self._normalize = make_normalizer(self._fold_homophones)
            return self._normalize(txt)
        text: str = super().preprocess_text(txt, lang)
        return text

    def encode(self, txt: str, lang: str) -> list[int]:
        lang = canonical_language(lang)
        if lang == AMHARIC and self.tokenizer is not None and self.tokenizer.token_to_id(f"[{AMHARIC}]") is None:
            raise TokenizerError(
                f"{self.vocab_file}: this vocabulary has no [am] token, so it cannot encode Amharic; "
                f"use the extended vocab.json written by the tokenizer stage (tokenizer/vocab.json in the run folder)"
            )
        ids: list[int] = super().encode(txt, lang)
        return ids

    def decode(self, seq: Union[Iterable[int], torch.Tensor]) -> str:
        if hasattr(seq, "tolist"):
            seq = seq.tolist()
        tags = self._tag_ids()
        text: str = super().decode([int(i) for i in seq if int(i) not in tags])
        return text

    def _tag_ids(self) -> set[int]:
        """Ids of [START] and the language tokens: added special tokens other than [SPACE]/[STOP]/[UNK]."""
        keep = {"[SPACE]", "[STOP]", "[UNK]"}
        return {
            token_id
            for token_id, added in self.tokenizer.get_added_tokens_decoder().items()
            if added.special and added.content not in keep
        }


def make_tokenizer(
    vocab_path: str | os.PathLike[str],
    settings: TextSettings,
    *,
    normalizer: Optional[Callable[[str], str]] = None,
) -> AmharicTokenizer:
    """The AmharicTokenizer for ``vocab_path`` with the run's settings: the one place it is built.

    ``normalizer`` replaces the project's normaliser (tests use a stand-in); by default it is
    ``make_normalizer(settings.fold_homophones)``, the one the tokenizer stage trained on.
    """
    return AmharicTokenizer(
        vocab_path, char_limit=settings.char_limit, fold_homophones=settings.fold_homophones, normalizer=normalizer
    )

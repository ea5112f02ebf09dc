"""Read and write XTTS vocab.json files, and encode text exactly the way XTTS does.

An XTTS vocab.json is a ``tokenizers`` BPE: ``[STOP]``=0, ``[UNK]``=1, ``[SPACE]``=2, characters,
merged pieces, and language tokens (``[en]``, ``[START]``, ...) that are *added tokens* sitting in
the middle of the id range, not at its end. coqui's ``VoiceBpeTokenizer.encode`` feeds the
tokenizer ``"[lang]" + text.replace(" ", "[SPACE]")``: the added tokens are cut out first, then the
``Whitespace`` pre-tokenizer splits each remaining piece into words (``\\w+`` or ``[^\\w\\s]+`` runs)
and BPE merges apply inside a word only. :func:`xtts_words` gives those words for a text.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, pre_tokenizers

from xtts_ft.errors import TokenizerError
from xtts_ft.json_types import JsonObject, JsonValue
from xtts_ft.languages import AMHARIC
from xtts_ft.tempfiles import atomic_write

REQUIRED_SPECIALS = ("[STOP]", "[UNK]", "[SPACE]")


@dataclass
class VocabTable:
    """The parts of a vocab.json that decide encoding, plus the raw JSON to write back."""

    path: Path
    data: JsonObject  # the whole file; vocab and merges below are views into it
    vocab: dict[str, int]
    merges: list[tuple[str, str]]
    merges_as_strings: bool  # old files store "a b", tokenizers >= 0.20 writes ["a", "b"]

    @property
    def added_tokens(self) -> list[JsonObject]:
        tokens: list[JsonObject] = self.data.setdefault("added_tokens", [])  # each {"id", "content", ...}
        return tokens

    def all_ids(self) -> dict[str, int]:
        ids = dict(self.vocab)
        ids.update({t["content"]: t["id"] for t in self.added_tokens})
        return ids

    @property
    def num_rows(self) -> int:
        """Rows the GPT text embedding needs: highest id + 1 (real vocabs have gaps in their ids)."""
        return max(self.all_ids().values()) + 1

    def single_characters(self) -> set[str]:
        return {token for token in self.vocab if len(token) == 1}

    def synced_data(self) -> JsonObject:
        """The JSON to write: ``data`` with the current vocab and merges, merges in the file's own format."""
        model = self.data["model"]
        model["vocab"] = self.vocab
        model["merges"] = [f"{a} {b}" if self.merges_as_strings else [a, b] for a, b in self.merges]
        return self.data


def effective_merges(merges: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Merges in the rank order ``tokenizers`` applies them.

    A pair listed twice takes the rank of its *last* listing (the real XTTS vocab lists ~1,700
    pairs twice); ``tokenizers`` re-saves a file in exactly this order, without the repeats.
    """
    last = {merge: rank for rank, merge in enumerate(merges)}
    return sorted(last, key=last.__getitem__)


def _split_merge(merge: JsonValue, path: Path) -> tuple[str, str]:
    if isinstance(merge, str):
        parts = merge.split(" ")
    elif isinstance(merge, list):
        parts = merge
    else:
        parts = []
    if len(parts) != 2 or not all(isinstance(p, str) and p for p in parts):
        raise TokenizerError(f"{path}: malformed BPE merge {merge!r}; use an XTTS vocab.json (e.g. the base model's)")
    return parts[0], parts[1]


def read_vocab(path: str | os.PathLike[str]) -> VocabTable:
    """Parse a vocab.json; any problem is a one-line TokenizerError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TokenizerError(f"{path}: vocabulary file not found; give the path of an XTTS vocab.json") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenizerError(f"{path}: cannot read the vocabulary ({exc}); check the file and its permissions") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TokenizerError(f"{path}: not valid JSON ({exc}); the vocab.json is damaged, fetch it again") from None
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise TokenizerError(f"{path}: not a BPE tokenizer file; give the vocab.json of an XTTS model")
    merges_raw = model.setdefault("merges", [])
    merges = [_split_merge(m, path) for m in merges_raw]
    table = VocabTable(
        path=path,
        data=data,
        vocab=model["vocab"],
        merges=merges,
        merges_as_strings=bool(merges_raw) and isinstance(merges_raw[0], str),
    )
    ids = table.all_ids()
    missing = [s for s in REQUIRED_SPECIALS if s not in ids]
    if missing:
        raise TokenizerError(f"{path}: lacks the XTTS special tokens {', '.join(missing)}; it is not an XTTS vocab.json")
    return table


def write_vocab(table: VocabTable, out_path: Path) -> None:
    """Write atomically (temp file + rename) so a crash never leaves half a vocab.json."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_path, table.synced_data())


def write_json_atomic(out_path: Path, obj: JsonValue, indent: int | None = 2) -> None:
    atomic_write(out_path, json.dumps(obj, ensure_ascii=False, indent=indent) + "\n")


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` from a vocab.json, or a TokenizerError naming the file."""
    table = read_vocab(path)  # readable, JSON, BPE, XTTS specials: clear messages for the common mistakes
    try:
        return Tokenizer.from_str(json.dumps(table.data, ensure_ascii=False))
    except Exception as exc:  # tokenizers raises plain Exception for every parse error
        raise TokenizerError(f"{path}: the tokenizers library rejects this vocabulary ({exc})") from None


def id_mismatches(table: VocabTable) -> list[str]:
    """Tokens whose id after loading with ``tokenizers`` differs from the id written in the file.

    ``tokenizers`` ignores the "id" of an added token that is not also in the model vocab: it
    gives it the next free id after the model vocab instead. So appending to the model vocab
    would move such tokens (the tiny vocab's [en], [START], ...) unless they are pinned there.
    """
    try:
        loaded = Tokenizer.from_str(json.dumps(table.synced_data(), ensure_ascii=False)).get_vocab(with_added_tokens=True)
    except Exception as exc:  # tokenizers raises plain Exception for every parse error
        raise TokenizerError(f"{table.path}: the tokenizers library rejects this vocabulary ({exc})") from None
    return [f"{t} ({i} -> {loaded.get(t)})" for t, i in table.all_ids().items() if loaded.get(t) != i]


def pin_added_tokens(table: VocabTable) -> None:
    """Put every added token into the model vocab with its own id, as real XTTS vocabularies do."""
    for token in table.added_tokens:
        table.vocab.setdefault(token["content"], token["id"])


def xtts_text(text: str, lang: str) -> str:
    """The exact string coqui's VoiceBpeTokenizer.encode hands to the tokenizer (after preprocessing)."""
    return f"[{lang}]{text}".replace(" ", "[SPACE]")


def xtts_words(text: str) -> list[str]:
    """The BPE words of ``text`` in XTTS encoding: split at spaces ([SPACE]), then Whitespace-pretokenize."""
    pre = pre_tokenizers.Whitespace()
    return [word for chunk in text.split(" ") if chunk for word, _ in pre.pre_tokenize_str(chunk)]


def encode_many(tokenizer: Tokenizer, texts: Iterable[str], lang: str = AMHARIC) -> list[list[int]]:
    """Ids as ``VoiceBpeTokenizer.encode`` gives them for already-preprocessed texts (batched, no warnings)."""
    return [enc.ids for enc in tokenizer.encode_batch([xtts_text(t, lang) for t in texts])]

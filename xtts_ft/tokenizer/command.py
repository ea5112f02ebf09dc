"""The `tokenizer` command's work, without argparse: read text files, build the extended vocabulary."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from xtts_ft.errors import TokenizerError
from xtts_ft.tokenizer.extend import build_extended_vocab
from xtts_ft.tokenizer.report import TokenizerReport


def read_text_lines(path: Path) -> list[str]:
    """Non-blank lines of a UTF-8 text file (one sentence per line); any problem names the file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TokenizerError(f"{path}: text file not found; check the path (one sentence per line, UTF-8)") from None
    except IsADirectoryError:
        raise TokenizerError(f"{path}: is a folder; give a text file (one sentence per line, UTF-8)") from None
    except OSError as exc:
        raise TokenizerError(f"{path}: cannot read the text file ({exc.strerror}); check its permissions") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TokenizerError(
            f"{path}: not UTF-8 (bad byte 0x{raw[exc.start]:02x} on line {line}); save the file as UTF-8"
        ) from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def text_files_in(paths: Sequence[Path]) -> list[Path]:
    """Each path as given if it is a file; a folder stands for its ``*.txt`` files (sorted by name)."""
    out: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.glob("*.txt") if p.is_file())
            if not found:
                raise TokenizerError(f"{path}: folder holds no .txt file; give text files (one sentence per line, UTF-8)")
            out.extend(found)
        else:
            out.append(path)
    return out


def tokenizer_command(
    base_vocab: Path,
    text_files: list[Path],
    new_tokens: int,
    out_dir: Path,
    normalizer: Callable[[str], str],
    *,
    min_frequency: int,
    eval_files: Sequence[Path] = (),
) -> TokenizerReport:
    """Build ``out_dir/vocab.json`` and ``out_dir/report.json`` from text files; see build_extended_vocab.

    A folder among ``text_files`` or ``eval_files`` stands for its ``*.txt`` files. ``eval_files``
    (optional) are held-out texts: measured, never trained on.
    """
    if not text_files:
        raise TokenizerError(f"{out_dir}: no text files given; pass at least one Amharic text file (one sentence per line)")
    texts = [line for f in text_files_in(text_files) for line in read_text_lines(f)]
    eval_texts = [line for f in text_files_in(eval_files) for line in read_text_lines(f)]
    return build_extended_vocab(
        Path(base_vocab),
        texts,
        new_tokens,
        Path(out_dir),
        min_frequency=min_frequency,
        normalizer=normalizer,
        eval_texts=eval_texts,
    )

"""Tokens per character on held-out Amharic: the extended vocabulary vs. plain BPE vs. characters only.

    python benchmarks/tokenizer_compression.py --train-text datasets/amharic_text \\
        --heldout /path/to/heldout.txt --base-vocab /path/to/base/vocab.json

``--train-text`` takes files and folders (a folder stands for its .txt files). The text is
normalised the way training and synthesis normalise it: ``xtts_ft.text.normalize_text`` with the
product's default homophone folding (``--no-fold-homophones`` measures without it).

For each size N (default 1000, 2000, 4000) it builds the extension with N new tokens and trains a
plain BPE from scratch with N tokens in all, on the same training text, and measures both on the
held-out text. "chars only" is the base vocabulary plus [am] and the characters (no merges).
Tokens per character: see xtts_ft.tokenizer.report ([SPACE] counts as a token; characters of the
normalised text, spaces included). The held-out text is only measured, never trained on.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Callable

from xtts_ft.config import TextConfig
from xtts_ft.errors import UserError
from xtts_ft.tokenizer.command import read_text_lines, text_files_in
from xtts_ft.tokenizer.extend import build_extended_vocab
from xtts_ft.tokenizer.report import TOKENS_PER_CHAR_DEFINITION, measure


def pick_normalizer(fold_homophones: bool) -> tuple[Callable[[str], str], str]:
    """The project's own front-end: what training and synthesis feed the tokenizer."""
    from xtts_ft.text import normalize_text

    return (
        lambda s: normalize_text(s, fold_homophones=fold_homophones).text,
        f"xtts_ft.text.normalize_text(fold_homophones={fold_homophones})",
    )


def plain_bpe(train: list[str], size: int, out: Path):
    """A BPE trained from scratch on the training text with ``size`` tokens in all, XTTS-shaped."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    specials = ["[STOP]", "[UNK]", "[SPACE]", "[am]"]
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=specials, min_frequency=2, show_progress=False)
    tok.train_from_iterator(train, trainer=trainer)  # spaces split words exactly like [SPACE] does at encode
    tok.add_special_tokens(specials)
    tok.save(str(out))
    return Tokenizer.from_file(str(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-text", type=Path, nargs="+", required=True,
                    help="Amharic training text files (one sentence per line) or folders of .txt files")
    ap.add_argument("--heldout", type=Path, required=True, help="held-out Amharic text (measured only)")
    ap.add_argument("--base-vocab", type=Path, required=True, help="base XTTS vocab.json")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000])
    ap.add_argument("--min-frequency", type=int, default=2)
    ap.add_argument("--fractions", type=float, nargs="+", default=[],
                    help="also measure N=2000 trained on these fractions of the training text (a fixed, "
                         "hash-chosen subset of lines), to see how the figure moves with the amount of text")
    ap.add_argument("--fold-homophones", action=argparse.BooleanOptionalAction, default=TextConfig.fold_homophones,
                    help="normalise with homophone folding, as text.fold_homophones (default: %(default)s)")
    args = ap.parse_args(argv)

    normalizer, norm_name = pick_normalizer(args.fold_homophones)
    try:
        train_raw = [line for f in text_files_in(args.train_text) for line in read_text_lines(f)]
        heldout_raw = read_text_lines(args.heldout)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    train = [t for t in map(normalizer, train_raw) if t.strip()]
    heldout = [t for t in map(normalizer, heldout_raw) if t.strip()]
    print(f"normaliser: {norm_name}")
    print(f"training text: {len(train)} lines, {sum(map(len, train))} characters")
    print(f"held-out text: {len(heldout)} lines, {sum(map(len, heldout))} characters")
    print(TOKENS_PER_CHAR_DEFINITION)
    print()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        chars = build_extended_vocab(
            args.base_vocab, train, 10**6, tmp / "chars", min_frequency=10**9, normalizer=lambda s: s, eval_texts=heldout
        )
        rows.append(("chars only", chars.new_tokens_added, chars.eval_tokens_per_char, chars.eval_unk_rate, None, None, 0.0))
        for size in args.sizes:
            started = time.perf_counter()
            try:
                rep = build_extended_vocab(
                    args.base_vocab, train, size, tmp / f"ext{size}", min_frequency=args.min_frequency,
                    normalizer=lambda s: s, eval_texts=heldout,
                )
            except UserError as exc:
                print(f"N={size}: {exc}", file=sys.stderr)
                continue
            seconds = time.perf_counter() - started
            plain = measure(plain_bpe(train, size, tmp / f"plain{size}.json"), heldout)
            rows.append(
                (f"N={size}", rep.new_tokens_added, rep.eval_tokens_per_char, rep.eval_unk_rate,
                 plain.tokens_per_char, plain.unk_rate, seconds)
            )

    header = (
        f"{'vocab':<12}{'added':>7}{'ext tok/char':>14}{'ext unk':>9}"
        f"{'plain BPE tok/char':>20}{'plain unk':>11}{'build s':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, added, tpc, unk, ptpc, punk, secs in rows:
        plain_cols = f"{ptpc:>20.4f}{punk:>11.4f}" if ptpc is not None else f"{'-':>20}{'-':>11}"
        print(f"{name:<12}{added:>7}{tpc:>14.4f}{unk:>9.4f}{plain_cols}{secs:>9.2f}")
    if args.fractions:
        print()
        print(f"{'fraction':<10}{'lines':>7}{'characters':>12}{'N=2000 ext tok/char':>21}{'plain BPE':>11}")
        with tempfile.TemporaryDirectory() as tmp:
            for fraction in sorted(args.fractions):
                part = [t for t in train if zlib.crc32(t.encode("utf-8")) % 10_000 < fraction * 10_000]
                rep = build_extended_vocab(args.base_vocab, part, 2000, Path(tmp) / f"f{fraction}",
                                           min_frequency=args.min_frequency, normalizer=lambda s: s, eval_texts=heldout)
                plain = measure(plain_bpe(part, 2000, Path(tmp) / f"p{fraction}.json"), heldout)
                print(f"{fraction:<10g}{len(part):>7}{sum(map(len, part)):>12}{rep.eval_tokens_per_char:>21.4f}"
                      f"{plain.tokens_per_char:>11.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

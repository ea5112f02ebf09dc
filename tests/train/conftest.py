"""Shared fixtures: a tiny random XTTS, an extended tiny vocabulary, and a small synthetic dataset.

The vocabulary is the tiny model's plus ``[am]`` and two extra tokens, so the model really grows
new text rows (ids >= ``base_vocab_size``) and every training text uses one (``[am]``), as an
Amharic run does. Texts are lowercase English the tiny vocabulary encodes; the tokenizer's
normaliser is the identity (the Amharic normaliser lives in another stage).
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from trainhelpers import TEXTS, write_csv, write_wav

from xtts_ft.base_model import BaseModelFiles
from xtts_ft.config import Config


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory) -> BaseModelFiles:
    from xtts_ft.tiny_model import write_tiny_model

    return BaseModelFiles.from_dir(write_tiny_model(tmp_path_factory.mktemp("tiny_xtts")))


@pytest.fixture(scope="session")
def vocab(tiny_base, tmp_path_factory) -> tuple[Path, int]:
    """(extended vocab.json, base vocab size)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny_base.vocab_json))
    base_size = tok.get_vocab_size()
    tok.add_special_tokens(["[am]"])
    tok.add_tokens(["qq", "zz"])
    path = tmp_path_factory.mktemp("vocab") / "vocab.json"
    tok.save(str(path))
    assert json.loads(path.read_text())["added_tokens"][-1]["id"] == base_size + 2
    return path, base_size


@pytest.fixture(scope="session")
def tokenizer(vocab):
    from xtts_ft.tokenizer.voice_tokenizer import AmharicTokenizer

    return AmharicTokenizer(str(vocab[0]), normalizer=lambda s: s, char_limit=200, fold_homophones=False)


@pytest.fixture(scope="session")
def built_model(tiny_base, vocab, tokenizer):
    from xtts_ft.model import build_training_model

    return build_training_model(tiny_base, vocab[0], tokenizer)


@pytest.fixture
def model_factory(built_model):
    """A fresh copy of the built model per run (building takes seconds, copying a fraction of that)."""
    return lambda *_args: copy.deepcopy(built_model)


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> tuple[Path, Path]:
    """(metadata_train.csv, metadata_eval.csv): 12 + 4 clean clips of 1-2.5 s."""
    root = tmp_path_factory.mktemp("data")
    (root / "wavs").mkdir()
    rows = []
    for i, text in enumerate(TEXTS):
        name = f"wavs/clip_{i:02d}.wav"
        write_wav(root / name, 1.0 + 0.1 * ((i * 7) % 16), seed=i)
        rows.append((name, text))
    return write_csv(root / "metadata_train.csv", rows[:12]), write_csv(root / "metadata_eval.csv", rows[12:])


@pytest.fixture(scope="session")
def codes_cache(built_model, dataset, tokenizer, tmp_path_factory) -> Path:
    """DVAE codes of every test clip, computed once; runs start with a copy (tests of the cache itself do not)."""
    import torch

    from xtts_ft.model import model_limits
    from xtts_ft.train.codes_cache import build_codes_cache
    from xtts_ft.train.data import Limits, load_clips

    limits = Limits(**model_limits(built_model.xtts))
    clips = [c for csv in dataset for c in load_clips(csv, tokenizer, "am", limits, progress=False)[0]]
    out = tmp_path_factory.mktemp("codes")
    build_codes_cache(built_model, clips, out, torch.device("cpu"), progress=False)
    return out


@pytest.fixture
def trainer(tiny_base, vocab, tokenizer, dataset, model_factory, codes_cache):
    """``trainer(cfg, **hooks)`` runs ``run_training`` on the tiny model and the synthetic dataset.

    The run dir starts with the session's DVAE code cache unless ``seed_cache=False``.
    """
    from xtts_ft.pipeline import run_training

    def run(cfg: Config, seed_cache: bool = True, **kwargs):
        kwargs.setdefault("model_factory", model_factory)
        target = Path(cfg.run.output_dir) / "cache" / "dvae_codes"
        if seed_cache and not target.exists():
            shutil.copytree(codes_cache, target)
        return run_training(
            cfg, base=tiny_base, vocab_path=vocab[0], base_vocab_size=vocab[1], train_csv=dataset[0],
            eval_csv=dataset[1], run_dir=Path(cfg.run.output_dir), tokenizer=tokenizer, **kwargs,
        )

    return run


@pytest.fixture
def script_args(tiny_base, vocab, dataset, codes_cache):
    """Write the JSON that scripts/run_small.py reads; the run dir starts with the code cache."""

    def make(run_dir: Path, sections: dict | None = None, weights_out: Path | None = None,
             speaker_wav: Path | None = None) -> Path:
        shutil.copytree(codes_cache, run_dir / "cache" / "dvae_codes")
        args = {"base": str(tiny_base.root), "vocab": str(vocab[0]), "base_vocab_size": vocab[1],
                "train_csv": str(dataset[0]), "eval_csv": str(dataset[1]), "run_dir": str(run_dir),
                "sections": sections or {}, "weights_out": str(weights_out) if weights_out else None,
                "speaker_wav": str(speaker_wav) if speaker_wav else None}
        path = run_dir.parent / f"{run_dir.name}.json"
        path.write_text(json.dumps(args))
        return path

    return make



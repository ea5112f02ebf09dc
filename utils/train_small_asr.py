#!/usr/bin/env python3
"""Train the small committed Amharic recogniser on espeak-ng speech.

    nice -n 10 python utils/train_small_asr.py [--out xtts_ft/asr/small_model] [--minutes 55]

Why it exists: the demo and the tests need a speech recogniser that really hears, and no model
can be downloaded where they run. This script makes one from nothing but espeak-ng and text the
project wrote (``datasets/amharic_text/``):

1. Sentences: each project-written line is cut into clauses of 2-12 words and put through
   :func:`xtts_ft.text.error_rates.scoring_text` (numbers read out, homophones folded,
   punctuation dropped). Clauses with Latin letters are left out (espeak-ng would switch to
   English), and so is every line that shares a clause with the demo's own sentences
   (``utils/demo_sentences_am.txt``, ``datasets/amharic_demo/``) so the demo clips stay unseen.
2. Speech: espeak-ng's Amharic voice speaks each clause with a random variant (male and female),
   pitch, speed and word gap (the demo data uses three fixed ones), resampled to 16 kHz, with a
   little noise and gain so the model does not learn espeak's exact silence.
3. Model: a small ``Wav2Vec2BertForCTC`` trained from scratch with CTC on the log-mel
   filterbank features of ``SeamlessM4TFeatureExtractor`` (frames stacked 4 at a time: 25 frames
   per second, still over twice espeak's letter rate and half the cost of the usual 2), and a
   ``Wav2Vec2CTCTokenizer`` over the Ethiopic letters seen in training plus the word break.
4. Output: the Hugging Face file layout (config.json, model.safetensors,
   preprocessor_config.json, tokenizer files) in ``--out``, loadable with
   ``AutoModelForCTC.from_pretrained`` / ``AutoProcessor.from_pretrained`` like any Hub model.
5. Measurement: CER on held-out espeak clauses (never trained on) and on every demo clip,
   printed and written to ``<out>/training_report.json``.

Training stops after ``--steps`` optimiser steps or ``--minutes`` of training, whichever comes
first; the speech and features are cached in ``--work`` so a second run starts training at once.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from xtts_ft.audio_io import RECOGNIZER_RATE  # noqa: E402
from xtts_ft.text.error_rates import corpus_cer, scoring_text  # noqa: E402

TEXT_DIR = REPO_ROOT / "datasets" / "amharic_text"
DEMO_SENTENCES = REPO_ROOT / "utils" / "demo_sentences_am.txt"
DEMO_DIR = REPO_ROOT / "datasets" / "amharic_demo"
DEFAULT_OUT = REPO_ROOT / "xtts_ft" / "asr" / "small_model"
SAMPLE_RATE = RECOGNIZER_RATE  # the rate the small recogniser is trained and used at
FEATURE_STRIDE = 4  # filterbank frames stacked per model frame (100 fps / 4 = 25 fps)
CLAUSE_SPLIT_RE = re.compile(r"[።፣፤፥፦፧!?.,;:]+")
LATIN_RE = re.compile(r"[a-z]")
# espeak-ng variants: a spread of male and female timbres (the demo uses m3, f3, m1).
VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5")


def demo_texts() -> list[str]:
    """Every sentence the demo speaks or ships, as scoring text."""
    lines = DEMO_SENTENCES.read_text(encoding="utf-8").splitlines()
    extra = DEMO_DIR / "extra_text.txt"
    if extra.is_file():
        lines += extra.read_text(encoding="utf-8").splitlines()
    meta = DEMO_DIR / "metadata.csv"
    lines += [row.split("|")[1] for row in meta.read_text(encoding="utf-8").splitlines()[1:] if "|" in row]
    return [t for t in (scoring_text(line) for line in lines) if t]


def clauses_of(line: str) -> list[str]:
    """Cut a written line into clauses of 2-12 words (long clauses in 12-word pieces)."""
    out = []
    for part in CLAUSE_SPLIT_RE.split(line):
        words = scoring_text(part).split()
        for i in range(0, len(words), 12):
            piece = words[i : i + 12]
            if len(piece) >= 2:
                out.append(" ".join(piece))
    return out


def collect_clauses() -> tuple[list[str], int]:
    """(distinct training clauses, number of project lines left out for touching demo text)."""
    demo = demo_texts()
    demo_set = set(demo)
    excluded = 0
    seen: set[str] = set()
    clauses: list[str] = []
    for path in sorted(TEXT_DIR.glob("*.txt")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            scored = scoring_text(line)
            pieces = clauses_of(line)
            # A line overlaps the demo when it equals a demo sentence, contains one, or one of its
            # clauses appears inside a demo sentence.
            if scored in demo_set or any(d in scored for d in demo) or any(p in d for p in pieces for d in demo):
                excluded += 1
                continue
            for piece in pieces:
                if piece not in seen and not LATIN_RE.search(piece):
                    seen.add(piece)
                    clauses.append(piece)
    return clauses, excluded


def espeak(text: str, rng: random.Random) -> np.ndarray:
    variant = rng.choice(VARIANTS)
    cmd = [
        "espeak-ng", "-v", f"am+{variant}",
        "-p", str(rng.randint(30, 75)),
        "-s", str(rng.randint(125, 180)),
        "-g", str(rng.choice((0, 0, 1, 2))),
        "-b", "1", "--stdout", text,
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, check=True)
    audio, sr = sf.read(io.BytesIO(result.stdout), dtype="float32", always_2d=True)
    audio = audio.mean(axis=1)
    import soxr

    audio = soxr.resample(audio, sr, SAMPLE_RATE, quality="HQ").astype(np.float32)
    # Gain and a little noise so silence is not digital zero (the model must not key on it).
    audio *= rng.uniform(0.3, 1.0) / max(1e-4, float(np.abs(audio).max()))
    noise_db = rng.uniform(-70, -45)
    audio += np.random.default_rng(rng.randrange(2**31)).normal(0, 10 ** (noise_db / 20), audio.shape).astype(np.float32)
    return audio


def build_features(clauses: list[str], work: Path, feature_extractor, seed: int) -> list[np.ndarray]:
    """Speak every clause once and return its filterbank features (cached in ``work``)."""
    cache = work / f"features_{len(clauses)}_{seed}.npz"
    if cache.is_file():
        data = np.load(cache)
        return [data[str(i)] for i in range(len(clauses))]
    rng = random.Random(seed)
    features = []
    started = time.time()
    for i, text in enumerate(clauses):
        audio = espeak(text, rng)
        feats = feature_extractor(audio, sampling_rate=SAMPLE_RATE, return_tensors="np")["input_features"][0]
        features.append(feats.astype(np.float16))
        if (i + 1) % 500 == 0:
            print(f"  spoke {i + 1}/{len(clauses)} clauses ({time.time() - started:.0f} s)", flush=True)
    work.mkdir(parents=True, exist_ok=True)
    np.savez(cache, **{str(i): f for i, f in enumerate(features)})
    return features


def make_tokenizer(clauses: list[str], out: Path):
    from transformers import Wav2Vec2CTCTokenizer

    letters = sorted({ch for clause in clauses for ch in clause if ch != " "})
    vocab = {"<pad>": 0, "<unk>": 1, "|": 2}
    for ch in letters:
        vocab[ch] = len(vocab)
    out.mkdir(parents=True, exist_ok=True)
    vocab_file = out / "vocab.json"
    vocab_file.write_text(json.dumps(vocab, ensure_ascii=False, indent=0), encoding="utf-8")
    return Wav2Vec2CTCTokenizer(
        str(vocab_file), unk_token="<unk>", pad_token="<pad>", word_delimiter_token="|", do_lower_case=False
    )


def make_model(vocab_size: int, args):
    from transformers import Wav2Vec2BertConfig, Wav2Vec2BertForCTC

    config = Wav2Vec2BertConfig(
        vocab_size=vocab_size,
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        intermediate_size=args.hidden * 4,
        feature_projection_input_dim=80 * FEATURE_STRIDE,
        position_embeddings_type="rotary",
        conv_depthwise_kernel_size=15,
        hidden_dropout=0.1,
        activation_dropout=0.05,
        attention_dropout=0.05,
        feat_proj_dropout=0.05,
        final_dropout=0.1,
        layerdrop=0.0,
        mask_time_prob=0.05,
        mask_time_length=5,
        mask_feature_prob=0.05,
        mask_feature_length=10,
        pad_token_id=0,
        ctc_loss_reduction="mean",
        ctc_zero_infinity=True,
        add_adapter=False,
    )
    return Wav2Vec2BertForCTC(config)


def batches(lengths: list[int], max_frames: int, rng: random.Random) -> list[list[int]]:
    """Length-sorted batches of at most ``max_frames`` padded frames, in random order."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], rng.random()))
    out, current, longest = [], [], 0
    for i in order:
        longest_if = max(longest, lengths[i])
        if current and longest_if * (len(current) + 1) > max_frames:
            out.append(current)
            current, longest_if = [], lengths[i]
        current.append(i)
        longest = longest_if
    if current:
        out.append(current)
    rng.shuffle(out)
    return out


def collate(indices, features, labels):
    import torch

    longest = max(features[i].shape[0] for i in indices)
    dim = features[indices[0]].shape[1]
    x = torch.zeros(len(indices), longest, dim)
    mask = torch.zeros(len(indices), longest, dtype=torch.long)
    longest_label = max(len(labels[i]) for i in indices)
    y = torch.full((len(indices), longest_label), -100, dtype=torch.long)
    for row, i in enumerate(indices):
        n = features[i].shape[0]
        x[row, :n] = torch.from_numpy(features[i].astype(np.float32))
        mask[row, :n] = 1
        y[row, : len(labels[i])] = torch.tensor(labels[i])
    return x, mask, y


def transcribe(model, tokenizer, feats: list[np.ndarray], batch: int = 16) -> list[str]:
    import torch

    texts = []
    model.eval()
    with torch.inference_mode():
        order = sorted(range(len(feats)), key=lambda i: feats[i].shape[0])
        result: dict[int, str] = {}
        for start in range(0, len(order), batch):
            idx = order[start : start + batch]
            x, mask, _ = collate(idx, feats, [[0]] * len(feats))
            logits = model(input_features=x, attention_mask=mask).logits
            ids = logits.argmax(-1)
            for row, i in enumerate(idx):
                n = int(mask[row].sum())
                result[i] = tokenizer.decode(ids[row, :n].tolist())
        texts = [result[i] for i in range(len(feats))]
    model.train()
    return texts


def demo_clips(feature_extractor) -> tuple[list[np.ndarray], list[str]]:
    import soxr

    feats, refs = [], []
    for row in (DEMO_DIR / "metadata.csv").read_text(encoding="utf-8").splitlines()[1:]:
        audio_file, text, _ = row.split("|")
        audio, sr = sf.read(DEMO_DIR / audio_file, dtype="float32", always_2d=True)
        audio = soxr.resample(audio.mean(axis=1), sr, SAMPLE_RATE, quality="HQ").astype(np.float32)
        feats.append(feature_extractor(audio, sampling_rate=SAMPLE_RATE, return_tensors="np")["input_features"][0])
        refs.append(text)
    return feats, refs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--work", type=Path, default=Path("/tmp/xtts_ft_small_asr"))
    parser.add_argument("--clauses", type=int, default=5000, help="training clauses to speak")
    parser.add_argument("--held-out", type=int, default=200, help="clauses kept for the CER measurement")
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--minutes", type=float, default=48.0, help="stop training after this long")
    parser.add_argument("--hidden", type=int, default=144)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--max-frames", type=int, default=3000, help="padded frames per batch")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a busy small CPU)")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)
    if shutil.which("espeak-ng") is None:
        print("espeak-ng is not installed; install it with `apt-get install espeak-ng`", file=sys.stderr)
        return 2

    import torch
    from transformers import SeamlessM4TFeatureExtractor, Wav2Vec2BertProcessor

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    clauses, excluded = collect_clauses()
    rng.shuffle(clauses)
    held_out = clauses[: args.held_out]
    train = clauses[args.held_out : args.held_out + args.clauses]
    print(f"{len(clauses)} clauses from the project's text ({excluded} lines left out: they touch demo text); "
          f"training on {len(train)}, holding out {len(held_out)}", flush=True)

    feature_extractor = SeamlessM4TFeatureExtractor(stride=FEATURE_STRIDE)
    tokenizer = make_tokenizer(train + held_out, args.work / "tokenizer")
    started = time.time()
    feats = build_features(train + held_out, args.work, feature_extractor, args.seed)
    train_feats, held_feats = feats[: len(train)], feats[len(train) :]
    print(f"features ready in {time.time() - started:.0f} s", flush=True)

    labels = [tokenizer(t).input_ids for t in train]
    model = make_model(len(tokenizer), args)
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters", flush=True)
    optimiser = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = min(300, args.steps // 10)

    def lr_at(step: int, progress: float) -> float:
        # Warm up, then cosine decay over whichever limit (steps or minutes) is nearer.
        if step < warmup:
            return (step + 1) / warmup
        return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    lengths = [f.shape[0] for f in train_feats]
    step, epoch, train_started = 0, 0, time.time()
    deadline = train_started + args.minutes * 60
    model.train()
    done = False
    while not done:
        epoch += 1
        for idx in batches(lengths, args.max_frames, rng):
            progress = max(step / args.steps, (time.time() - train_started) / (args.minutes * 60))
            for group in optimiser.param_groups:
                group["lr"] = args.lr * lr_at(step, progress)
            x, mask, y = collate(idx, train_feats, labels)
            loss = model(input_features=x, attention_mask=mask, labels=y).loss
            optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimiser.step()
            step += 1
            if step % 50 == 0:
                print(f"step {step} epoch {epoch} loss {loss.item():.3f} lr {optimiser.param_groups[0]['lr']:.2e} "
                      f"{time.time() - train_started:.0f} s", flush=True)
            if step % 500 == 0:
                hyp = transcribe(model, tokenizer, held_feats[:50])
                print(f"  held-out CER (50 clauses) {corpus_cer(list(zip(held_out[:50], hyp))):.3f}: {hyp[0]!r}",
                      flush=True)
            if step >= args.steps or time.time() > deadline:
                done = True
                break
    train_s = time.time() - train_started

    hyp = transcribe(model, tokenizer, held_feats)
    held_cer = corpus_cer(list(zip(held_out, hyp)))
    demo_feats, demo_refs = demo_clips(feature_extractor)
    demo_hyp = transcribe(model, tokenizer, demo_feats)
    demo_cer = corpus_cer(list(zip(demo_refs, demo_hyp)))
    for ref, h in list(zip(demo_refs, demo_hyp))[:3]:
        print(f"  demo: {scoring_text(ref)!r}\n     -> {h!r}")

    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    Wav2Vec2BertProcessor(feature_extractor=feature_extractor, tokenizer=tokenizer).save_pretrained(args.out)
    report = {
        "training_clauses": len(train),
        "held_out_clauses": len(held_out),
        "steps": step,
        "epochs": epoch,
        "train_minutes": round(train_s / 60, 1),
        "threads": args.threads,
        "held_out_espeak_cer": round(held_cer, 4),
        "demo_clips": len(demo_refs),
        "demo_cer": round(demo_cer, 4),
        "hidden": args.hidden,
        "layers": args.layers,
    }
    (args.out / "training_report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"held-out espeak CER {held_cer:.3f} ({len(held_out)} clauses); demo clips CER {demo_cer:.3f} "
          f"({len(demo_refs)} clips); {step} steps in {train_s / 60:.1f} min; saved to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

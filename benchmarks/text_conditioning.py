"""Benchmark: does the GPT read the text? True text against shuffled text on held-out clips.

    python benchmarks/text_conditioning.py                 # ~300 clips, 400 steps (about 10 min on 2 cores)
    python benchmarks/text_conditioning.py --quick         # ~1 min smoke: 36 clips, 20 steps (numbers mean little)
    python benchmarks/text_conditioning.py --clips 150 --steps 1000 --batch 16 --device cuda --dvae-steps 300
                                                           # the GPU run in docs/text_conditioning.md

A tiny XTTS (``xtts_ft.random_model``, size tiny: 2-layer, 64-channel GPT, random weights) is trained from scratch
on CPU through the project's own stages: ``prepare_stage`` and ``tokenizer_stage`` of the pipeline,
then ``train`` (the real loop: code cache, sampler, stability guard, checkpoints). The data are
synthetic Amharic clips spoken by espeak-ng (three voices of ``utils/make_demo_dataset.py``) from
phrases of the project's written corpus (``datasets/amharic_text``), generated into the work
folder (a temporary one unless ``--work``), never into the repository.

Then, on the held-out clips (the run's own eval split), the GPT's mel loss (the cross-entropy of the
DVAE codes, each clip's own voice prompt masked out as in training) is measured twice with the same
audio and the same prompt: once with each clip's true text, once with the texts shuffled among the
clips (a derangement: every clip gets another clip's text; the mean over ``--shuffles`` of them).
A model that ignores its text (a text/audio attention mask that hides the text, wrong token ids,
text positions fed as padding) scores both the same. The untrained model is measured the same way
first, as the control that must show no gap. Prints both losses, the gap and the ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CORPUS = ROOT / "datasets" / "amharic_text"
# a phrase: Ethiopic letters and spaces only (numbers and Latin words would be read by other rules)
PHRASE = re.compile(r"^[\u1200-\u137f ]+$")
SPLIT = re.compile(r"[።፣፤፥፦፧?!.,:;\n]+")


def corpus_phrases(min_chars: int, max_chars: int) -> list[str]:
    """Distinct phrases of the written corpus between the sentence and clause marks, in a fixed order."""
    seen: dict[str, None] = {}
    for path in sorted(CORPUS.glob("*.txt")):
        for piece in SPLIT.split(path.read_text(encoding="utf-8")):
            piece = " ".join(piece.split())
            if min_chars <= len(piece) <= max_chars and PHRASE.match(piece):
                seen.setdefault(piece, None)
    return list(seen)


def make_clips(out: Path, count: int, seed: int) -> Path:
    """``count`` espeak-ng clips of distinct phrases, round-robin over the demo's three voices (coqui CSV)."""
    import soundfile as sf

    from utils.make_demo_dataset import SAMPLE_RATE, SPEAKERS, find_espeak, synthesise, trim_and_normalise

    meta = out / "metadata.csv"
    if meta.is_file() and len(meta.read_text(encoding="utf-8").splitlines()) == count + 1:
        return out  # made by an earlier run with the same --work and --clips
    phrases = corpus_phrases(20, 60)
    if len(phrases) < count:
        raise SystemExit(f"the corpus {CORPUS} has only {len(phrases)} usable phrases; ask for at most that many")
    random.Random(seed).shuffle(phrases)
    exe = find_espeak()
    (out / "wavs").mkdir(parents=True, exist_ok=True)
    rows = ["audio_file|text|speaker_name"]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="textcond_espeak_") as tmp:
        for i, text in enumerate(phrases[:count]):
            spk = SPEAKERS[i % len(SPEAKERS)]
            rel = f"wavs/{spk.name}_{i:04d}.flac"
            audio = trim_and_normalise(synthesise(exe, spk, text, Path(tmp)))
            sf.write(str(out / rel), audio, SAMPLE_RATE, format="FLAC", subtype="PCM_16")
            rows.append(f"{rel}|{text}|{spk.name}")
    meta.write_text("\n".join(rows) + "\n", encoding="utf-8")
    print(f"data: {count} clips written to {out} in {time.perf_counter() - t0:.0f} s")
    return out


def run_config(work: Path, data: Path, args):
    from xtts_ft.config import config_from_dict

    return config_from_dict({
        "run": {"output_dir": str(work / f"run_{args.steps}steps_seed{args.seed}"), "seed": args.seed,
                "device": args.device},
        "base_model": {"source": str(work / "tiny_base"), "create_tiny": True},
        "dataset": {"path": str(data), "format": "coqui", "eval_fraction": args.eval_fraction,
                    "split_by_speaker": True, "num_workers": 1},
        "tokenizer": {"new_tokens": 800, "extra_text_files": []},
        "training": {"max_steps": args.steps, "batch_size": args.batch, "lr": args.lr, "warmup_steps": min(20, args.steps // 5),
                     "lr_schedule": "cosine", "num_workers": 0, "cpu_threads": args.threads,
                     "log_every": max(args.steps // 10, 1),
                     # a short voice prompt leaves most of each clip to be predicted from the text
                     "min_conditioning_s": 1.0, "max_conditioning_s": 2.0},
        "precision": {"mode": "fp32"},
        # --dvae-steps: the DVAE stage first, so the codes the GPT predicts carry what the audio says (the tiny
        # model's DVAE is random: most of its codebook goes unused)
        "dvae": {"finetune": args.dvae_steps > 0, "steps": max(args.dvae_steps, 1), "lr": args.dvae_lr,
                 "warmup_steps": min(50, args.dvae_steps // 5), "every_steps": max(args.dvae_steps, 1)},
        "checkpoint": {"every_steps": args.steps, "keep_last": 1},
        "evaluation": {"every_steps": 0, "eval_at_start": False},
    }, source="benchmarks/text_conditioning.py")


def derangements(n: int, count: int, seed: int) -> list[list[int]]:
    """``count`` permutations of range(n) with no fixed point: every clip gets another clip's text."""
    rng, out = random.Random(seed), []
    while len(out) < count:
        perm = list(range(n))
        rng.shuffle(perm)
        if all(p != i for i, p in enumerate(perm)):
            out.append(perm)
    return out


def held_out_mel_loss(model, clips, code_paths, cfg, batch: int) -> float:
    """Clip-weighted mean of the prompt-masked mel cross-entropy over ``clips`` (fixed eval prompt crops)."""
    import torch

    from xtts_ft.train.data import ClipDataset, collate, eval_batches

    tcfg = cfg.training
    dataset = ClipDataset(clips, sample_rate=22050, cond_min_s=tcfg.min_conditioning_s,
                          cond_max_s=tcfg.max_conditioning_s, seed=cfg.run.seed, train=False, code_paths=code_paths)
    total = 0.0
    with torch.no_grad():
        for keys in eval_batches(clips, batch, max_batches=10_000):
            b = collate([dataset[k] for k in keys])
            out = model(text_inputs=b["padded_text"], text_lengths=b["text_lengths"],
                        audio_codes=b["codes"], wav_lengths=b["wav_lengths"],
                        cond_mels=model.conditioning_mels(b["conditioning"]), cond_idxs=b["cond_idxs"])
            total += float(out["loss_mel_ce"]) * len(keys)
    return total / len(clips)


def compare(model, clips, cfg, args) -> dict:
    """Mel loss with the true texts and, averaged, with ``args.shuffles`` derangements of them."""
    import dataclasses

    import torch

    from xtts_ft.layout import RunLayout
    from xtts_ft.train.codes_cache import build_codes_cache

    model.eval()
    # the DVAE codes of the audio, computed once (the run's own code cache: training reuses them)
    paths = build_codes_cache(model, clips, RunLayout(cfg.run_dir).codes_cache, torch.device("cpu"), progress=False)
    true = held_out_mel_loss(model, clips, paths, cfg, args.batch)
    shuffled = []
    for perm in derangements(len(clips), args.shuffles, args.seed):
        wrong = [dataclasses.replace(c, tokens=clips[p].tokens, text=clips[p].text) for c, p in zip(clips, perm)]
        shuffled.append(held_out_mel_loss(model, wrong, paths, cfg, args.batch))
    mean_shuffled = sum(shuffled) / len(shuffled)
    return {"true_text": true, "shuffled_text": mean_shuffled, "shuffled_each": shuffled,
            "gap": mean_shuffled - true, "ratio": mean_shuffled / true}


def load_model(base, vocab_path: Path, cfg, checkpoint=None):
    from xtts_ft.inference.checkpoint_folder import load_checkpoint_gpt_state
    from xtts_ft.model import build_training_model
    from xtts_ft.text_settings import TextSettings
    from xtts_ft.tokenizer.voice_tokenizer import make_tokenizer

    tokenizer = make_tokenizer(vocab_path, TextSettings.from_config(cfg))
    model = build_training_model(base, vocab_path, tokenizer)
    if checkpoint is not None:
        model.xtts.gpt.load_state_dict(load_checkpoint_gpt_state(checkpoint), strict=False)
    return model, tokenizer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, help="Folder for the clips and the run (kept; default: a temporary one).")
    p.add_argument("--clips", type=int, default=300)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-fraction", type=float, default=0.15)
    p.add_argument("--shuffles", type=int, default=3, help="Derangements of the texts averaged for the wrong-text loss.")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="Where the DVAE stage and the GPT train (cpu, cuda or auto); the "
                                                    "comparison runs on the CPU.")
    p.add_argument("--dvae-steps", type=int, default=0, help="Fine-tune the DVAE this many steps first (0: off).")
    p.add_argument("--dvae-lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--json", type=Path, help="Also write the result here.")
    p.add_argument("--quick", action="store_true", help="Smoke size: 36 clips, 20 steps, batch 4.")
    args = p.parse_args()
    if args.quick:
        args.clips, args.steps, args.batch, args.eval_fraction, args.shuffles = 36, 20, 4, 0.25, 1

    import torch

    from xtts_ft.base_model import resolve_base_model
    from xtts_ft.layout import EVAL_CSV, TRAIN_CSV
    from xtts_ft.model import model_limits
    from xtts_ft.pipeline import base_vocab_size, prepare_stage, run_training, tokenizer_stage
    from xtts_ft.train import TrainInputs
    from xtts_ft.train.data import Limits, load_clips
    from xtts_ft.train.dvae_stage import dvae_stage

    torch.set_num_threads(args.threads)  # a script's own process: the package itself never sets this
    scratch = None if args.work else tempfile.TemporaryDirectory(prefix="text_conditioning_")
    work = args.work or Path(scratch.name)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    data = make_clips(work / "clips", args.clips, args.seed)
    cfg = run_config(work, data, args)
    base = resolve_base_model(cfg.base_model)
    data_dir = prepare_stage(cfg, base)
    vocab = tokenizer_stage(cfg, base, data_dir)
    dvae = dvae_stage(cfg, base, data_dir)  # None without --dvae-steps
    if dvae is not None:  # the control, the GPT and the comparison all use the fine-tuned DVAE
        import dataclasses

        base = dataclasses.replace(base, dvae_pth=dvae.dvae_pth)
        print(f"dvae: {dvae.steps} steps; held-out reconstruction loss {dvae.eval_loss_before} -> {dvae.eval_loss_after}")

    untrained, tokenizer = load_model(base, vocab, cfg)
    limits = Limits(**model_limits(untrained.xtts))
    eval_clips, _ = load_clips(data_dir / EVAL_CSV, tokenizer, cfg.run.language, limits, progress=False)
    train_clips, _ = load_clips(data_dir / TRAIN_CSV, tokenizer, cfg.run.language, limits, progress=False)
    if len(eval_clips) < 2:
        raise SystemExit(f"{data_dir / EVAL_CSV}: {len(eval_clips)} usable held-out clips; raise --clips")
    before = compare(untrained, eval_clips, cfg, args)
    del untrained

    t_train = time.perf_counter()
    outcome = run_training(cfg, TrainInputs(base=base, vocab_path=vocab, base_vocab_size=base_vocab_size(base),
                                            train_csv=data_dir / TRAIN_CSV, eval_csv=data_dir / EVAL_CSV,
                                            run_dir=cfg.run_dir))
    train_s = time.perf_counter() - t_train
    if outcome.last_checkpoint is None:
        raise SystemExit("training wrote no checkpoint; see the log above")
    if outcome.stopped_by_signal:  # rerunning the same command continues the run (checkpoint.resume: auto)
        print(f"training was stopped at step {outcome.step}: the comparison below uses that checkpoint")
    trained, _ = load_model(base, vocab, cfg, outcome.last_checkpoint)
    after = compare(trained, eval_clips, cfg, args)

    print(f"\n{len(train_clips)} training clips, {len(eval_clips)} held-out clips (3 espeak-ng voices), "
          f"{outcome.step} steps x batch {args.batch} at lr {args.lr:g} in {train_s:.0f} s; "
          f"wrong text: mean of {args.shuffles} derangement(s)")
    print(f"{'model':<22}{'true text':>11}{'shuffled':>11}{'gap':>9}{'ratio':>8}")
    for name, r in (("untrained (control)", before), (f"trained {outcome.step} steps", after)):
        print(f"{name:<22}{r['true_text']:>11.4f}{r['shuffled_text']:>11.4f}{r['gap']:>9.4f}{r['ratio']:>8.3f}")
    print(f"total {time.perf_counter() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({
            "clips": {"train": len(train_clips), "held_out": len(eval_clips)}, "steps": outcome.step,
            "batch": args.batch, "lr": args.lr, "train_seconds": round(train_s, 1), "device": args.device,
            "dvae_steps": args.dvae_steps,
            "untrained": before, "trained": after}, indent=2), encoding="utf-8")
    if scratch is not None:
        scratch.cleanup()


if __name__ == "__main__":
    main()

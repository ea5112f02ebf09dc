"""How much the speech recogniser costs: throughput, share of an evaluation, transcript-check rate.

    python benchmarks/asr_throughput.py                   # the default asr.model's real size, CPU
    python benchmarks/asr_throughput.py --size small      # the committed small recogniser (quick)

``--size default`` builds a ``Wav2Vec2ForCTC`` with random weights from
``benchmarks/asr_default_model_config.json`` (the default model's architecture, 316 M parameters;
speed does not depend on the weights), saves it with a character tokenizer and a
wav2vec2 feature extractor, and runs it through the project's own ``Recognizer`` (batching,
16 kHz resampling, greedy CTC decoding), so the number is what a run pays. Prints:

* throughput in audio-seconds per second (``--threads`` torch threads, CPU);
* the share of one evaluation's wall time it adds: the default evaluation sentences in
  ``--voices`` voices produce about ``--eval-audio-s`` seconds of audio, synthesised at real-time
  factor ``--synthesis-rtf`` (XTTS-v2's synthesis time / audio time on the same machine);
* the transcript check's rate: clips per second and the minutes for 1,000 clips of
  ``--clip-s`` seconds (measured on ``--clips`` clips, extrapolated linearly: the cost is per
  audio second).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
CONFIG = Path(__file__).resolve().parent / "asr_default_model_config.json"


def build_default_model(folder: Path) -> None:
    from transformers import Wav2Vec2Config, Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC, Wav2Vec2Processor

    values = {k: v for k, v in json.loads(CONFIG.read_text()).items() if not k.startswith("_")}
    values.pop("architectures", None), values.pop("model_type", None)
    config = Wav2Vec2Config(**values)
    letters = [chr(c) for c in range(0x1200, 0x1200 + config.vocab_size - 3)]
    vocab = {"<pad>": 0, "<unk>": 1, "|": 2, **{ch: i + 3 for i, ch in enumerate(letters)}}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tokenizer = Wav2Vec2CTCTokenizer(str(folder / "vocab.json"), word_delimiter_token="|")
    extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0,
                                         do_normalize=True, return_attention_mask=True)
    Wav2Vec2Processor(feature_extractor=extractor, tokenizer=tokenizer).save_pretrained(folder)
    model = Wav2Vec2ForCTC(config)
    print(f"default-size recogniser: {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters "
          f"(random weights)", flush=True)
    model.save_pretrained(folder)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=["default", "small"], default="default")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clips", type=int, default=16, help="clips timed (after one warm-up batch)")
    parser.add_argument("--clip-s", type=float, default=5.0, help="seconds per clip")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--voices", type=int, default=2, help="reference voices per evaluation")
    parser.add_argument("--eval-audio-s", type=float, default=None,
                        help="audio seconds per voice in one evaluation (default: 0.075 s per character of the "
                             "default sentences)")
    parser.add_argument("--synthesis-rtf", type=float, default=1.0,
                        help="XTTS synthesis time / audio time on this machine (CPU: about 1-3)")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)

    import torch

    from xtts_ft.asr import SMALL_MODEL_DIR
    from xtts_ft.asr.recognizer import Recognizer
    from xtts_ft.config import DEFAULT_TEST_SENTENCES
    from xtts_ft.text.normalizer import normalize_text

    torch.set_num_threads(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="asr_bench_"))
    try:
        if args.size == "default":
            build_default_model(tmp)
            folder = tmp
        else:
            folder = SMALL_MODEL_DIR
        rec = Recognizer(folder, device="cpu", batch_size=args.batch_size)
        rng = np.random.default_rng(0)
        n = int(args.clip_s * 16000)
        clips = [(0.1 * rng.standard_normal(n)).astype(np.float32) for _ in range(args.clips)]
        rec.transcribe(clips[: args.batch_size])  # warm-up: first-call allocations are not the steady state
        started = time.perf_counter()
        rec.transcribe(clips)
        seconds = time.perf_counter() - started
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    audio_s = args.clips * args.clip_s
    throughput = audio_s / seconds
    chars = sum(len(normalize_text(s, fold_homophones=True).text) for s in DEFAULT_TEST_SENTENCES)
    eval_audio = args.voices * (args.eval_audio_s if args.eval_audio_s is not None else 0.075 * chars)
    asr_s = eval_audio / throughput
    synth_s = eval_audio * args.synthesis_rtf
    clips_per_s = throughput / args.clip_s
    result = {
        "size": args.size, "threads": args.threads, "audio_s_per_s": round(throughput, 2),
        "eval_audio_s": round(eval_audio, 1), "eval_asr_s": round(asr_s, 1),
        "eval_share": round(asr_s / (asr_s + synth_s), 3), "synthesis_rtf": args.synthesis_rtf,
        "check_clips_per_s": round(clips_per_s, 2), "check_minutes_per_1000_clips": round(1000 / clips_per_s / 60, 1),
    }
    print(f"recogniser ({args.size}) on CPU, {args.threads} thread(s): {throughput:.1f} audio-seconds/s "
          f"({args.clips} clips of {args.clip_s:g} s in {seconds:.1f} s)")
    print(f"evaluation: {eval_audio:.0f} s of samples -> {asr_s:.1f} s of recognition = {100 * result['eval_share']:.0f} % "
          f"of the evaluation at synthesis RTF {args.synthesis_rtf:g}")
    print(f"transcript check: {clips_per_s:.2f} clips/s -> {result['check_minutes_per_1000_clips']:.1f} min "
          f"for 1,000 clips of {args.clip_s:g} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How fast ``ingest`` turns long audio into clips, and how much memory it needs.

    nice -n 10 python benchmarks/ingest_speed.py                 # 60 minutes of audio, 2 threads
    python benchmarks/ingest_speed.py --minutes 1 --threads 1    # a quick look

Builds ``--minutes`` of one long recording from the demo clips of one speaker (spk1's one-sentence
clips, cycled, joined by 0.8 s of faint noise; written block by block at ``--rate`` Hz with
``--channels`` channels, default 48 kHz stereo: the case that must not be decoded at once) and the
text it reads. Then ingests it in alignment mode (``--text``) and in VAD mode, each in its own child
process with ``--threads`` torch threads and the committed small recogniser, and prints per mode:
wall time, minutes of processing per hour of audio, clips made and rejected, and the child's peak
resident memory (``ru_maxrss``). ``--one-process`` runs both modes in one child, one after the other
(the test's form: one start instead of two; the memory column is then that child's peak so far).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
DEMO = REPO_ROOT / "datasets" / "amharic_demo"
PAUSE_S = 0.8


def build(folder: Path, minutes: float, rate: int, channels: int) -> tuple[Path, Path, int]:
    """The long recording and its text, written a sentence at a time (never the whole hour in memory)."""
    import soundfile as sf
    import soxr

    from xtts_ft.data.audio import trim_silence
    from xtts_ft.ingest.text_units import split_sentences

    rows = [line.split("|") for line in (DEMO / "metadata.csv").read_text(encoding="utf-8").splitlines()[1:]]
    pool = []
    for audio, text, speaker in rows:
        if speaker == "spk1" and len(split_sentences(text)) == 1:
            y, sr = sf.read(str(DEMO / audio), dtype="float32")
            y = trim_silence(y, 40.0)
            pool.append((soxr.resample(y, sr, rate).astype(np.float32) if sr != rate else y, text))
    rng = np.random.default_rng(0)
    wav, txt = folder / "long.wav", folder / "long.txt"
    target, written, sentences = int(minutes * 60 * rate), 0, []
    with sf.SoundFile(str(wav), "w", rate, channels, subtype="PCM_16") as f:
        k = 0
        while written < target:
            y, text = pool[k % len(pool)]
            piece = np.concatenate([y, np.zeros(int(PAUSE_S * rate), np.float32)])
            piece = piece + rng.normal(0, 0.002, len(piece)).astype(np.float32)
            f.write(np.repeat(piece[:, None], channels, axis=1))
            written += len(piece)
            sentences.append(text)
            k += 1
    txt.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    return wav, txt, len(sentences)


def child(modes: str, wav: str, txt: str, folder: str, threads: int) -> int:
    """Ingest in each of ``modes`` (comma-separated) in turn, into FOLDER/out_MODE; one JSON line per mode."""
    import torch

    torch.set_num_threads(threads)
    from xtts_ft.asr import SMALL_MODEL_DIR
    from xtts_ft.config import Config, with_changes
    from xtts_ft.ingest.command import ingest

    cfg = with_changes(Config(), asr={"model": str(SMALL_MODEL_DIR), "device": "cpu"})
    for mode in modes.split(","):
        started = time.monotonic()
        report = ingest(cfg, [wav], Path(folder) / f"out_{mode}", text=Path(txt) if mode == "text" else None)
        seconds = time.monotonic() - started
        print(json.dumps({"mode": mode, "seconds": round(seconds, 1), "clips": report.clips,
                          "rejected": report.rejected, "text_without_audio": len(report.text_without_audio),
                          "audio_hours": report.source_hours,
                          "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}),
              flush=True)
    return 0


def print_row(row: dict[str, Any], threads: int) -> dict[str, Any]:
    """One mode's line; the row with its minutes of processing per hour of audio added."""
    row["minutes_per_audio_hour"] = round(row["seconds"] / 60 / max(row["audio_hours"], 1e-9), 2)
    print(f"{row['mode']:5s}: {row['seconds']:.1f} s for {row['audio_hours'] * 60:.1f} min of audio = "
          f"{row['minutes_per_audio_hour']:.2f} min per audio hour; {row['clips']} clips, rejected "
          f"{row['rejected'] or 'none'}, text without audio {row['text_without_audio']}; "
          f"peak RSS {row['peak_rss_mb']:.0f} MB ({threads} threads)", flush=True)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="Minutes of long audio to build.")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each ingest (default 2 cores).")
    parser.add_argument("--rate", type=int, default=48000, help="Sample rate of the built recording.")
    parser.add_argument("--channels", type=int, default=2, help="Channels of the built recording.")
    parser.add_argument("--modes", default="text,vad", help="Comma-separated: text (alignment), vad.")
    parser.add_argument("--dir", help="Work folder (default: a temporary one).")
    parser.add_argument("--json", help="Write the rows here too.")
    parser.add_argument("--one-process", action="store_true",
                        help="Ingest every mode in one child process, in turn (quicker: one start; the peak memory "
                             "column is then that process's peak so far, not the mode's own).")
    parser.add_argument("--child", nargs=4, metavar=("MODES", "WAV", "TXT", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(*args.child, args.threads)
    with tempfile.TemporaryDirectory(prefix="ingest_speed_", dir=args.dir) as tmp:
        folder = Path(tmp)
        t0 = time.monotonic()
        wav, txt, n = build(folder, args.minutes, args.rate, args.channels)
        print(f"built {args.minutes:g} min of audio ({n} sentences, {args.rate} Hz, {args.channels} ch, "
              f"{wav.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - t0:.0f} s", flush=True)
        rows = []
        modes = args.modes.split(",")
        if args.one_process:
            print("every mode in one process (peak RSS: that process's so far)", flush=True)
        for group in ([modes] if args.one_process else [[mode] for mode in modes]):
            done = subprocess.run(
                [sys.executable, __file__, "--threads", str(args.threads), "--child", ",".join(group), str(wav),
                 str(txt), str(folder)],
                capture_output=True, text=True, cwd=REPO_ROOT,
            )
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return done.returncode
            for line in done.stdout.splitlines():  # the child's rows: one JSON line per mode
                if line.startswith('{"mode": '):
                    rows.append(print_row(json.loads(line), args.threads))
        if args.json:
            Path(args.json).write_text(json.dumps({"minutes": args.minutes, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

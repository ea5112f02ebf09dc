#!/usr/bin/env python3
"""Generate the bundled Amharic demo dataset with espeak-ng.

    python utils/make_demo_dataset.py [--out datasets/amharic_demo]

Reads the sentences in ``utils/demo_sentences_am.txt`` (one per line), deals them round-robin to
three synthetic "speakers" (espeak-ng's Amharic voice with different variants, pitches and
speeds), and writes a coqui-CSV dataset:

    <out>/metadata.csv        audio_file|text|speaker_name
    <out>/wavs/spk1_001.flac  22,050 Hz mono 16-bit FLAC
    <out>/README.md           written from the template below, with the numbers of this run
    <out>/extra_text.txt      copied from datasets/amharic_demo/ when --out is elsewhere

The transcript keeps the written form (2015, ዓ.ም, ዶ/ር, BBC); espeak-ng is given a spoken form
where it would otherwise read an abbreviation letter by letter (ዶ/ር -> "ዶ slash ር"), so the audio
says what a person reading the line would say. Numbers and Latin words are left to espeak-ng, which
reads them in Amharic and English respectively.

Deterministic: no randomness; the same espeak-ng and libsndfile versions give byte-identical files.
The audio is synthetic and only meant to show that the pipeline runs end to end.
"""

from __future__ import annotations

import argparse
import io
import math
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

REPO_ROOT = Path(__file__).resolve().parent.parent
SENTENCES_FILE = REPO_ROOT / "utils" / "demo_sentences_am.txt"
DEFAULT_OUT = REPO_ROOT / "datasets" / "amharic_demo"
EXTRA_TEXT_NAME = "extra_text.txt"

SAMPLE_RATE = 22050
PEAK = 0.9  # peak level after normalisation (about -0.9 dBFS)
PAD_S = 0.15  # silence kept before and after the speech
TRIM_DB = 45.0  # samples quieter than this below the peak count as silence when trimming
MIN_S, MAX_S = 1.0, 11.0  # every clip must fall in this range


@dataclass(frozen=True)
class Speaker:
    name: str
    voice: str  # espeak-ng voice+variant
    pitch: int  # -p, 0-99 (espeak default 50)
    speed: int  # -s, words per minute (espeak default 175)
    word_gap: int  # -g, extra pause between words in units of 10 ms


SPEAKERS: tuple[Speaker, ...] = (
    Speaker("spk1", "am+m3", pitch=40, speed=150, word_gap=0),
    Speaker("spk2", "am+f3", pitch=60, speed=165, word_gap=0),
    Speaker("spk3", "am+m1", pitch=65, speed=135, word_gap=1),
)

#: Written abbreviation -> what espeak-ng is asked to say. Only the audio uses these; the
#: transcript in metadata.csv keeps the written form, as a real dataset would.
SPOKEN_FORMS: tuple[tuple[str, str], ...] = (
    ("ዓ.ም", "ዓመተ ምሕረት"),
    ("ዶ/ር", "ዶክተር"),
    ("ፕ/ር", "ፕሮፌሰር"),
    ("ወ/ሮ", "ወይዘሮ"),
    ("ት/ቤት", "ትምህርት ቤት"),
    ("ኪ.ሜ", "ኪሎ ሜትር"),
)

ETHIOPIC = re.compile(r"[\u1200-\u137f]")


class DemoError(Exception):
    """A problem reported to the user as one line, without a traceback."""


def spoken_form(text: str) -> str:
    for written, spoken in SPOKEN_FORMS:
        text = text.replace(written, spoken)
    return text


def find_espeak() -> str:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise DemoError("espeak-ng is not installed or not on PATH; install it with `apt-get install espeak-ng`")
    voices = subprocess.run([exe, "--voices=am"], capture_output=True, text=True, check=False)
    if voices.returncode != 0 or not re.search(r"^\s*\d+\s+am\s", voices.stdout, re.MULTILINE):
        raise DemoError(
            f"espeak-ng at {exe} has no Amharic voice (`espeak-ng --voices=am` lists none); "
            "install the full espeak-ng data, e.g. `apt-get install espeak-ng`"
        )
    return exe


def read_sentences(path: Path) -> list[str]:
    if not path.is_file():
        raise DemoError(f"sentence file {path} is missing")
    sentences = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if "|" in line:
            raise DemoError(f"{path}:{n}: a sentence may not contain '|' (the metadata separator)")
        if not ETHIOPIC.search(line):
            raise DemoError(f"{path}:{n}: sentence has no Ethiopic letters: {line!r}")
        sentences.append(line)
    if len(sentences) < len(SPEAKERS):
        raise DemoError(f"{path}: need at least {len(SPEAKERS)} sentences, found {len(sentences)}")
    if len(set(sentences)) != len(sentences):
        raise DemoError(f"{path}: sentences must be distinct")
    return sentences


def synthesise(exe: str, speaker: Speaker, text: str, workdir: Path) -> np.ndarray:
    """Run espeak-ng and return float32 mono audio at SAMPLE_RATE."""
    txt = workdir / "in.txt"
    wav = workdir / "out.wav"
    txt.write_text(spoken_form(text) + "\n", encoding="utf-8")
    cmd = [
        exe,
        "-v", speaker.voice,
        "-p", str(speaker.pitch),
        "-s", str(speaker.speed),
        "-g", str(speaker.word_gap),
        "-b", "1",  # input is UTF-8
        "-f", str(txt),
        "-w", str(wav),
    ]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not wav.is_file():
        why = result.stderr.strip() or f"exit status {result.returncode}"
        raise DemoError(f"espeak-ng failed for {speaker.name} on {text!r}: {why}")
    audio, sr = sf.read(io.BytesIO(wav.read_bytes()), dtype="float32", always_2d=True)
    audio = audio.mean(axis=1)
    if sr != SAMPLE_RATE:
        import soxr

        audio = soxr.resample(audio, sr, SAMPLE_RATE, quality="HQ").astype(np.float32)
    return audio


def trim_and_normalise(audio: np.ndarray) -> np.ndarray:
    peak = float(np.max(np.abs(audio))) if audio.size else 0.0
    if peak <= 0.0:
        return audio
    loud = np.flatnonzero(np.abs(audio) > peak * 10 ** (-TRIM_DB / 20))
    pad = int(PAD_S * SAMPLE_RATE)
    start = max(int(loud[0]) - pad, 0)
    end = min(int(loud[-1]) + 1 + pad, audio.size)
    audio = audio[start:end]
    return (audio * (PEAK / peak)).astype(np.float32)


def pearson(x: list[float], y: list[float]) -> float:
    if len(x) < 2:
        return float("nan")
    return float(np.corrcoef(np.asarray(x, float), np.asarray(y, float))[0, 1])


README_TEMPLATE = """\
# amharic_demo: a tiny synthetic Amharic dataset

Written by `utils/make_demo_dataset.py`; edit the template there, not this file.

A small multi-speaker dataset in the coqui CSV layout so the whole pipeline (prepare, tokenizer,
train, evaluate) can be tried without downloading anything:

```
metadata.csv      audio_file|text|speaker_name   ({clips} rows)
wavs/*.flac       {sr} Hz, mono, 16-bit FLAC
extra_text.txt    {extra} further Amharic sentences for training the tokenizer's BPE merges
```

{clips} clips, {speakers} speakers, {total:.1f} s of audio in all ({min:.1f}-{max:.1f} s per clip).

**The voices are synthetic** (espeak-ng's Amharic voice with three variant/pitch/speed settings).
They sound robotic and are only meant to demonstrate that the pipeline runs; a model fine-tuned on
them will not speak good Amharic.

| speaker | espeak-ng voice | pitch (`-p`) | speed (`-s`, wpm) | word gap (`-g`) | clips |
|---|---|---|---|---|---|
{speaker_rows}

## How it was made

The transcripts in `utils/demo_sentences_am.txt` and the sentences in `extra_text.txt` were written
for this project. The sentences are dealt round-robin to the speakers; each is synthesised with
`espeak-ng -v <voice> -p <pitch> -s <speed> -g <gap>`, resampled to {sr} Hz if needed, trimmed to
{pad} s of silence at each end and peak-normalised to {peak}. `metadata.csv` keeps the written form
(`2015`, `ዓ.ም`, `ዶ/ር`, `BBC`); espeak-ng is given the spoken form of the abbreviations
so the audio says what a reader would say:

{abbrevs}

Numbers are read by espeak-ng itself (in Amharic); Latin words (`BBC`, `YouTube`) are read with
espeak-ng's English rules.

Regenerate it (needs `apt-get install espeak-ng`) with

```
python utils/make_demo_dataset.py
```

Made with {espeak_version}. Other espeak-ng versions may produce slightly different audio.

## Licence

The sentences, the generator and the audio were made by this project and are distributed under the
same terms as the rest of the project. espeak-ng is GPL-3.0, but that covers the program, not the
audio it produces: the synthesised clips are not encumbered by it.
"""


def write_readme(out: Path, stats: dict) -> None:
    rows = "\n".join(
        f"| {s.name} | `{s.voice}` | {s.pitch} | {s.speed} | {s.word_gap} | {stats['per_speaker'][s.name]} |"
        for s in SPEAKERS
    )
    text = README_TEMPLATE.format(
        clips=stats["clips"],
        speakers=len(SPEAKERS),
        total=stats["total_s"],
        min=stats["min_s"],
        max=stats["max_s"],
        sr=SAMPLE_RATE,
        extra=stats["extra_lines"],
        speaker_rows=rows,
        pad=PAD_S,
        peak=PEAK,
        abbrevs="\n".join(f"- `{w}` -> {s}" for w, s in SPOKEN_FORMS),
        espeak_version=stats["espeak_version"],
    )
    (out / "README.md").write_text(text, encoding="utf-8")


def verify(out: Path) -> dict:
    """Read the written dataset back and check it; returns summary numbers."""
    lines = (out / "metadata.csv").read_text(encoding="utf-8").splitlines()
    if lines[0] != "audio_file|text|speaker_name":
        raise DemoError(f"{out / 'metadata.csv'}: unexpected header {lines[0]!r}")
    durations: dict[str, list[float]] = {}
    chars: dict[str, list[float]] = {}
    all_d = []
    for row in lines[1:]:
        rel, text, spk = row.split("|")
        path = out / rel
        info = sf.info(str(path))
        audio, sr = sf.read(str(path), dtype="float32")
        if sr != SAMPLE_RATE or info.channels != 1 or audio.ndim != 1:
            raise DemoError(f"{rel}: expected {SAMPLE_RATE} Hz mono, got {sr} Hz, {info.channels} channel(s)")
        d = audio.size / sr
        if not MIN_S <= d <= MAX_S:
            raise DemoError(f"{rel}: duration {d:.2f} s is outside {MIN_S}-{MAX_S} s")
        if not np.isfinite(audio).all() or np.max(np.abs(audio)) < 0.1:
            raise DemoError(f"{rel}: audio is silent or invalid")
        durations.setdefault(spk, []).append(d)
        chars.setdefault(spk, []).append(len(spoken_form(text).replace(" ", "")))
        all_d.append(d)
    size = sum(p.stat().st_size for p in (out / "wavs").glob("*.flac"))
    return {
        "clips": len(all_d),
        "per_speaker": {k: len(v) for k, v in durations.items()},
        "total_s": float(sum(all_d)),
        "min_s": float(min(all_d)),
        "max_s": float(max(all_d)),
        "size_bytes": size,
        "corr": {k: pearson(chars[k], durations[k]) for k in durations},
        "chars_per_s": {k: float(sum(chars[k]) / sum(durations[k])) for k in durations},
    }


def generate(out: Path) -> dict:
    exe = find_espeak()
    sentences = read_sentences(SENTENCES_FILE)
    wavs = out / "wavs"
    wavs.mkdir(parents=True, exist_ok=True)
    for old in wavs.glob("spk*_*.flac"):  # stale clips from an earlier run
        old.unlink()

    counters = {s.name: 0 for s in SPEAKERS}
    rows = ["audio_file|text|speaker_name"]
    with tempfile.TemporaryDirectory(prefix="amharic_demo_") as tmp:
        for i, text in enumerate(sentences):
            spk = SPEAKERS[i % len(SPEAKERS)]
            counters[spk.name] += 1
            rel = f"wavs/{spk.name}_{counters[spk.name]:03d}.flac"
            audio = trim_and_normalise(synthesise(exe, spk, text, Path(tmp)))
            sf.write(str(out / rel), audio, SAMPLE_RATE, format="FLAC", subtype="PCM_16")
            rows.append(f"{rel}|{text}|{spk.name}")
            print(f"  {rel}  {audio.size / SAMPLE_RATE:5.2f} s  {text}", file=sys.stderr)
    (out / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")

    extra = out / EXTRA_TEXT_NAME
    source_extra = DEFAULT_OUT / EXTRA_TEXT_NAME
    if not extra.is_file() and source_extra.is_file():
        shutil.copyfile(source_extra, extra)

    stats = verify(out)
    stats["extra_lines"] = (
        sum(1 for line in extra.read_text(encoding="utf-8").splitlines() if line.strip()) if extra.is_file() else 0
    )
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"\d+(?:\.\d+)+\S*", version)
    stats["espeak_version"] = f"espeak-ng {match.group(0)}" if match else "espeak-ng"
    write_readme(out, stats)
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    try:
        stats = generate(args.out)
    except DemoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

    print(f"wrote {args.out}")
    print(f"  clips:    {stats['clips']} over {len(stats['per_speaker'])} speakers {stats['per_speaker']}")
    print(f"  duration: {stats['total_s']:.1f} s total, {stats['min_s']:.2f}-{stats['max_s']:.2f} s per clip")
    print(f"  size:     {stats['size_bytes'] / 2**20:.2f} MiB of FLAC")
    print(f"  extra:    {stats['extra_lines']} lines in {EXTRA_TEXT_NAME}")
    for name, r in stats["corr"].items():
        cps = stats["chars_per_s"][name]
        ok = "ok" if not math.isnan(r) and r > 0.8 else "CHECK"
        print(f"  {name}: duration vs. length r = {r:.3f} ({ok}), {cps:.1f} letters/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

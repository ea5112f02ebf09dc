#!/usr/bin/env bash
# Wheels for running this project's GPU benchmarks on a machine that has Python 3.12 and CUDA PyTorch but no
# network (a rented or lent card behind a firewall). Run it where pip can reach the package index:
#
#     bash benchmarks/gpu_wheels.sh [DIR] [PRESENT]    # DIR: .whl (ignored by git); PRESENT: see below
#
# It downloads coqui-tts and the audio packages this project pins in requirements.txt, with everything they need,
# built for CPython 3.12 on x86-64 Linux, and keeps only what the card's machine lacks: PRESENT is a file of the
# packages already installed there, one per line (`python3 -m pip list --format=freeze` on that machine; versions
# are ignored). torch and torchaudio are never downloaded: the machine's own CUDA build is used. transformers,
# tokenizers and huggingface_hub are kept at this project's pins even when present (another version there changes
# what the GPT computes, idiap/coqui-ai-TTS #400). Without PRESENT every wheel is kept (a few hundred MB).
#
# On the card's machine, from the project root:
#
#     source DIR/setup.sh    # the wheels into /tmp/site, first on PYTHONPATH; checked: ends "card ready: ..." or
#                            # "card set-up FAILED ..." (benchmarks/card_setup.sh, benchmarks/card_env.py)
set -euo pipefail
dir=${1:-.whl}
present=${2:-}
if [ -e "$dir" ]; then
  echo "gpu_wheels.sh: $dir already exists; move it aside or give another DIR" >&2
  exit 2
fi
pin() {  # the version requirements.txt pins for package $1
  sed -n "s/^$1==//p" requirements.txt
}
staging=$(mktemp -d)
# DIR is built beside itself and renamed into place at the end (mv -T: one rename, refused when DIR appeared
# meanwhile): a run stopped half-way, or a second one at the same time, never leaves a DIR with part of the wheels
building=$(mktemp -d "$(dirname "$dir")/.$(basename "$dir").partial-XXXXXX")
trap 'rm -rf "$staging" "$building"' EXIT
platform=()
for tag in manylinux1 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 manylinux_2_31 \
           manylinux_2_34; do
  platform+=(--platform "${tag}_x86_64")
done
# docopt (num2words needs it) is published as a source archive only; built here, it is pure Python
python3 -m pip wheel -q --no-deps docopt==0.6.2 -w "$staging"
python3 -m pip download -q --find-links "$staging" --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platform[@]}" --platform any -d "$staging" \
  "coqui-tts==$(pin coqui-tts)" "coqui-tts-trainer==$(pin coqui-tts-trainer)" "transformers==$(pin transformers)" \
  "tokenizers==$(pin tokenizers)" "huggingface_hub==$(pin huggingface_hub)" "soundfile==$(pin soundfile)" \
  "soxr==$(pin soxr)" "librosa==$(pin librosa)" "six==$(pin six)"
python3 - "$staging" "$building" "$present" <<'EOF'
import re
import shutil
import sys
from pathlib import Path

staging, target, present = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]


def name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text.strip().lower())


there = set()
if present:
    there = {name(re.split(r"[=<>@ ]", line, maxsplit=1)[0]) for line in Path(present).read_text().splitlines()
             if line.strip() and not line.startswith("#")}
pinned = {"transformers", "tokenizers", "huggingface-hub"}
kept = skipped = size = 0
for wheel in sorted(staging.glob("*.whl")):
    package = name(wheel.name.split("-")[0])
    if package in {"torch", "torchaudio"} or (package in there and package not in pinned):
        skipped += 1
        continue
    shutil.copy2(wheel, target / wheel.name)
    kept += 1
    size += wheel.stat().st_size
print(f"{kept} wheels ({size / 1e6:.1f} MB); {skipped} left out (already on the card's machine)")
EOF
cp benchmarks/card_setup.sh "$building/setup.sh"  # the wheels installed, then the environment checked (card_env.py)
if ! mv -T "$building" "$dir" 2>/dev/null; then
  echo "gpu_wheels.sh: $dir appeared while the wheels were gathered (another run?); it is left as it is" >&2
  exit 2
fi
echo "wheels and setup.sh in $dir"

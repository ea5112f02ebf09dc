#!/usr/bin/env bash
# The first thing to run on a card (after `source DIR/setup.sh`, benchmarks/gpu_wheels.sh): the serving figures and the
# training step's share of the card's peak, in one command of about five minutes, from the project root:
#
#     bash benchmarks/card_quick.sh OUT                       # OUT: a new or empty folder
#     CARD_REHEARSAL=cpu bash benchmarks/card_quick.sh OUT    # the same steps on this CPU, smaller (the tiny model)
#
# 1. the speech engine as serve runs it on a card (benchmarks/engine_load.py): the full-size random export, CUDA graphs,
#    serve's default precisions, 32 places, pieces of at most 40 codes (a random GPT never says stop), a lone caller and
#    then 32 at once, each after one untimed round; no profiler;
# 2. the compiled bf16 training step of the full-size GPT (benchmarks/gpu_throughput.py) at batch 48 and 96 (what does not
#    fit prints "out of memory"), longest clips;
# 3. the figures (benchmarks/card_summary.py), last, one line each, `name value unit`: first_audio_p50_1, first_audio_p95_32,
#    x_realtime_32, train_peak_share; n/a where a row is missing or the figure means nothing (no card: no peak).
#
# Everything goes straight into OUT: card_quick.txt (all that was printed, as it was printed), engine.json and
# train.json (rows, written again after each one), summary.txt (the figure lines). A stop (SIGTERM, the caller's time
# limit) ends the running step and leaves in OUT what was printed so far. The longer measurements:
# benchmarks/serving_gpu.sh; what the rows mean: docs/gpu_benchmarks.md.
set -u
out=${1:-}
if [ -z "$out" ] || [ $# -ne 1 ]; then
  echo "usage: [CARD_REHEARSAL=cpu] bash benchmarks/card_quick.sh OUT" >&2
  exit 2
fi
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "card_quick.sh: $out holds files already (earlier results?); give a new or empty folder" >&2
  exit 2
fi
mkdir -p "$out" || exit 2
# shellcheck source=benchmarks/card_steps.sh
source "$(dirname "${BASH_SOURCE[0]}")/card_steps.sh"
transcript "$out/card_quick.txt"

case "${CARD_REHEARSAL:-}" in
  "")
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    engine=(--size full --device cuda --paths engine-graphs --max-codes 40 --warmup-rounds 1)
    train=(--size full --precisions bf16 --paths compiled --compile on --batches 48,96 --steps 4 --warmup 2) ;;
  cpu)
    echo "rehearsal on the CPU ($(getconf _NPROCESSORS_ONLN) cores): the same steps and lines as on a card, smaller: the" \
         "tiny model's engine, eager (graphs are for CUDA, so no untimed round to record them), 2 codes per piece;" \
         "the small GPT's eager training step"
    engine=(--size tiny --device cpu --paths engine --max-codes 2 --warmup-rounds 0 --threads 1)
    train=(--size small --precisions bf16 --paths fast --compile off --batches 2 --steps 1 --warmup 1 --threads 1) ;;
  *)
    echo "card_quick.sh: CARD_REHEARSAL=${CARD_REHEARSAL}: give cpu, or leave it unset on a card" >&2
    exit 2 ;;
esac
step 01-engine 200 python benchmarks/engine_load.py "${engine[@]}" --clients 1 32 --max-active-streams 32 \
  --precision default --one-process --json "$out/engine.json"
step 02-train 100 python benchmarks/gpu_throughput.py "${train[@]}" --lengths equal --loader-workers 0 \
  --json "$out/train.json"
python benchmarks/card_summary.py "$out"  # the figure lines last (reads two small files: no time limit needed)

#!/usr/bin/env bash
# The speech engine's GPU measurements (issue 33) in one script, the most wanted first, each command with its own
# time limit so that a slow one cannot use up the rest. On a machine with a CUDA GPU, from the project root:
#
#     bash benchmarks/serving_gpu.sh [OUTDIR] [a|b|all]    # OUTDIR: serving_gpu_out; all: both parts
#
# Part a (the decode step, the vocoder windows, the engine in bf16 with and without graphs) and part b (the fp32
# rows of all four paths) each fit one 10-minute command, with their limits (the commands take less). Each
# command's output goes to the terminal and to OUTDIR/NN-name.txt; the lines starting with ### say what ran and
# how it ended (124: its time limit). What the rows mean: docs/gpu_benchmarks.md.
set -u
out=${1:-serving_gpu_out}
part=${2:-all}
mkdir -p "$out"

run() {  # run NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "### $name: $*"
  timeout "$limit" "$@" 2>&1 | grep -v '^\[transformers\]' | tee "$out/$name.txt"
  echo "### $name: exit ${PIPESTATUS[0]}"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/00-card.txt"
if [ "$part" != b ]; then
# the decode step: first decoder, current, current replayed from a CUDA graph (codes compared), and prefill together
run 01-decode-step-fp32 120 python benchmarks/decode_step.py --size full --device cuda --batches 1 8 32
run 02-decode-step-bf16 120 python benchmarks/decode_step.py --size full --device cuda --precision bf16 --batches 1 8 32
# HiFiGAN over 1, 8 and 32 callers' streamed windows: one call each against one call for all
run 03-vocoder-windows 60 python benchmarks/vocoder_windows.py --device cuda --batches 1 8 32
# the engine, bf16, eager step against graphed step, 32 places: first audio p50/p95 and audio seconds per second
run 04-engine-bf16 240 python benchmarks/engine_load.py --size full --device cuda --precision bf16 \
  --paths engine engine-graphs --clients 1 8 32 --max-codes 40 --max-active-streams 32 --one-process
fi
if [ "$part" != a ]; then
# the same card's fp32 rows of all four paths at 1 and 8 callers (the old paths take minutes at 32)
run 05-engine-fp32 500 python benchmarks/engine_load.py --size full --device cuda \
  --paths engine engine-graphs per-piece coqui-stream --clients 1 8 --max-codes 40 --one-process
fi

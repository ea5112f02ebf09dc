#!/usr/bin/env bash
# The speech engine's GPU measurements (issue 33) in one script, the most wanted first, each command with its own
# time limit so that a slow one cannot use up the rest. On a machine with a CUDA GPU, from the project root:
#
#     bash benchmarks/serving_gpu.sh [OUTDIR] [a|b|c|all]    # OUTDIR: serving_gpu_out; all: every part
#
# Part a (fp32, as serve runs on a card: the decode step and the prefill, the engine at 1/8/32 callers with the
# lone caller profiled, the sampling draw, the vocoder windows, a reader's host work per chunk), part b (bf16: the
# decode step, the engine; the readers' wake-ups) and part c (all four paths in fp32) each fit one 10-minute
# command, with their limits (the commands take less). Each command's output goes to the terminal and to OUTDIR/PART/NN-name.txt (a part whose
# folder exists already is refused: earlier results are never written over); the lines starting with ### say
# what ran and how it ended (124: its time limit). What the rows mean: docs/gpu_benchmarks.md.
set -u
out=${1:-serving_gpu_out}
case "${2:-all}" in
  a) parts=a ;; b) parts=b ;; c) parts=c ;; all) parts="a b c" ;;
  *) echo "serving_gpu.sh: part '$2': give a, b, c or all" >&2; exit 2 ;;
esac
for p in $parts; do  # each part writes a new folder of its own, never over earlier results
  if [ -e "$out/$p" ]; then
    echo "serving_gpu.sh: $out/$p already exists (earlier results); give another OUTDIR or move it aside" >&2
    exit 2
  fi
done

run() {  # run NAME SECONDS COMMAND...  (into the current part's folder, $dir)
  local name=$1 limit=$2
  shift 2
  echo "### $name: $*"
  timeout "$limit" "$@" 2>&1 | grep -v '^\[transformers\]' | tee "$dir/$name.txt"
  echo "### $name: exit ${PIPESTATUS[0]}"
}

part_a() {
  # the decode step (first decoder, current, graphed, with its head graphed, with the fused GELU; codes compared) and
  # the prefill, eager and from graphs
  run 01-decode-step-fp32 150 python benchmarks/decode_step.py --size full --device cuda --batches 1 8 32
  # the engine as serve runs it on a card (fp32, graphs), 32 places; the lone caller's round profiled: where its
  # first audio goes (trace in profiles/, the top kernels and how busy the GPU was under the row)
  # beside it, HiFiGAN on the decode steps' stream (vocoder_stream: off; the same model, a loop of its own)
  run 02-engine-fp32-graphs 330 python benchmarks/engine_load.py --size full --device cuda \
    --paths engine-graphs engine-graphs-one-stream --clients 1 8 32 --max-codes 40 --max-active-streams 32 \
    --one-process --warmup-rounds 1 --profile "$dir/profiles"
  # each row's code drawn with its own generator: torch.multinomial row by row against one division and argmax
  run 03-sampling-draw 25 python benchmarks/sampling_draw.py --device cuda --batches 1 8 32
  # HiFiGAN over 1, 8 and 32 callers' streamed windows: one call each against one call for all
  run 04-vocoder-windows 45 python benchmarks/vocoder_windows.py --device cuda --batches 1 8 32
  # a reader's host work per chunk: its window planned the first way (every latent, torch.unique) against now
  run 05-reader-host-work 20 python benchmarks/reader_host_work.py --device cuda --codes 800
}

part_b() {
  # bf16: the blocks' weights cast once (current, graphs) against autocast (reference, autocast)
  run 06-decode-step-bf16 150 python benchmarks/decode_step.py --size full --device cuda --precision bf16 --batches 1 8 32
  # the engine in bf16 (weights cast once, HiFiGAN under bf16 autocast), graphs, 32 places
  run 07-engine-bf16-graphs 300 python benchmarks/engine_load.py --size full --device cuda --precision bf16 \
    --paths engine-graphs --clients 1 8 32 --max-codes 40 --max-active-streams 32 --one-process --warmup-rounds 1
  # the decode loop's readers woken per chunk against per code, full-size GPT, 8 and 32 callers
  run 08-reader-wakeups 60 python benchmarks/reader_wakeups.py --size full --device cuda --callers 8 32 --codes 80
}

part_c() {
  # the same card's fp32 rows of all four paths at 1 and 8 callers (the old paths take minutes at 32)
  run 09-engine-fp32-all-paths 440 python benchmarks/engine_load.py --size full --device cuda \
    --paths engine engine-graphs per-piece coqui-stream --clients 1 8 --max-codes 40 --one-process --warmup-rounds 1
}

for p in $parts; do
  dir="$out/$p"
  mkdir -p "$dir"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$dir/00-card.txt"
  "part_$p"
done

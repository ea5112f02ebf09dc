#!/usr/bin/env bash
# The speech engine's longer GPU measurements, after benchmarks/card_quick.sh (the figures first, one call). On a machine
# with a CUDA GPU, from the project root (after `source DIR/setup.sh` where the machine needs carried wheels):
#
#     bash benchmarks/serving_gpu.sh [OUTDIR] [a|b|c|all]    # OUTDIR: serving_gpu_out; all: every part in turn
#
# Each part fits one 10-minute call with the wheels' set-up: its steps' time limits add up to at most 480 s (the steps
# take less). The most open questions first:
#   a: fp32, as serve runs on a card: the engine with HiFiGAN on a stream of its own against the decode steps' stream
#      at 1 and 32 callers, the lone caller's round profiled (where its first audio goes); the decode step's parts
#      (graphs, head graph, fused GELU, overlapped steps) and the prefill graphs; the sampling draw; the vocoder
#      windows; a reader's host work per chunk;
#   b: bf16 with the blocks' weights cast once: the decode step, the engine at 1 and 32 callers; the readers' wake-ups;
#   c: all four engine paths in fp32 at 1 and 8 callers (the old paths take minutes at 32).
# Everything a part prints goes to the terminal and to OUTDIR/PART/PART.txt as it is printed (lines starting with ###
# say what ran and how it ended; 124: its time limit), the profiler's traces beside it: OUTDIR/PART/ holds every file
# (a part whose folder exists already is refused: earlier results are never written over). A stop (SIGTERM) ends the
# running step and keeps what was printed. What the rows mean: docs/gpu_benchmarks.md.
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
# shellcheck source=benchmarks/card_steps.sh
source "$(dirname "${BASH_SOURCE[0]}")/card_steps.sh"

part_a() {
  # the engine as serve runs it on a card (fp32, graphs for the step, head and prefill), 32 places, beside HiFiGAN on
  # the decode steps' stream (vocoder_stream: off; the same model, a loop of its own); the lone caller's round
  # profiled: the top kernels and how busy the GPU was under the row, the gzipped trace beside this part's transcript
  step 01-engine-fp32-profiled 240 python benchmarks/engine_load.py --size full --device cuda \
    --paths engine-graphs engine-graphs-one-stream --clients 1 32 --max-codes 40 --max-active-streams 32 \
    --one-process --warmup-rounds 1 --profile "$dir"
  # the decode step (first decoder, current, graphed, with its head graphed, with the fused GELU, overlapped; codes
  # compared) and the prefill, eager and from graphs
  step 02-decode-step-fp32 150 python benchmarks/decode_step.py --size full --device cuda --batches 1 8 32
  # each row's code drawn with its own generator: torch.multinomial row by row against one division and argmax
  step 03-sampling-draw 25 python benchmarks/sampling_draw.py --device cuda --batches 1 8 32
  # HiFiGAN over 1, 8 and 32 callers' streamed windows: one call each against one call for all
  step 04-vocoder-windows 45 python benchmarks/vocoder_windows.py --device cuda --batches 1 8 32
  # a reader's host work per chunk: its window planned the first way (every latent, torch.unique) against now
  step 05-reader-host-work 20 python benchmarks/reader_host_work.py --device cuda --codes 800
}

part_b() {
  # bf16: the blocks' weights cast once (current, graphs) against autocast (reference, autocast)
  step 06-decode-step-bf16 150 python benchmarks/decode_step.py --size full --device cuda --precision bf16 --batches 1 8 32
  # the engine in bf16 (weights cast once, HiFiGAN under bf16 autocast), graphs, 32 places
  step 07-engine-bf16-graphs 240 python benchmarks/engine_load.py --size full --device cuda --precision bf16 \
    --paths engine-graphs --clients 1 32 --max-codes 40 --max-active-streams 32 --one-process --warmup-rounds 1
  # the decode loop's readers woken per chunk against per code, full-size GPT, 8 and 32 callers
  step 08-reader-wakeups 60 python benchmarks/reader_wakeups.py --size full --device cuda --callers 8 32 --codes 80
}

part_c() {
  # the same card's fp32 rows of all four paths at 1 and 8 callers (the old paths take minutes at 32)
  step 09-engine-fp32-all-paths 440 python benchmarks/engine_load.py --size full --device cuda \
    --paths engine engine-graphs per-piece coqui-stream --clients 1 8 --max-codes 40 --one-process --warmup-rounds 1
}

for p in $parts; do
  dir="$out/$p"
  mkdir -p "$dir"
  transcript "$dir/$p.txt"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "part_$p"
done

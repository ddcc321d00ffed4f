#!/usr/bin/env bash
# Training-quality benchmarks of seq2seq-train, each one run of the tool with its wall time:
#
#   reverse     --task reverse, lengths 5-20, 26 tokens; LSTM, additive attention, hidden 128; exact match on
#               1000 held-out sequences (target: >= 99% within 10 minutes)
#   bottleneck  reverse at lengths 30-40, the same LSTM with attention none and with additive attention, the
#               same steps (the documents' claim: the fixed context is clearly worse on long inputs)
#   dates       --task dates, LSTM, additive attention (target: >= 99% exact match)
#
# Usage: bench/seq2seq_quality.sh [reverse|bottleneck|dates|all] [--threads N] [--steps-scale F]
# Runs in a scratch folder; prints each run's command, its summary (one JSON line) and its wall time, and
# keeps the metrics (JSON lines) in $ATTNKIT_BENCH_OUT (default /tmp/seq2seq-quality). The load average
# before and after and the process' CPU time are printed too: the machine may be shared, and the figures then
# say so (with N threads on a quiet machine the wall time is about the CPU time / N).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${ATTNKIT_BIN:-$here/../build/bin}"
what="${1:-all}"
shift || true
threads=2
scale=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --steps-scale) scale="$2"; shift 2 ;;
    *) echo "seq2seq_quality.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
out="${ATTNKIT_BENCH_OUT:-/tmp/seq2seq-quality}"
mkdir -p "$out"
steps() { awk -v s="$1" -v f="$scale" 'BEGIN { printf "%d", s * f }'; }

train() {  # NAME ARGS...: one timed run
  local name="$1"
  shift
  local cmd=("$bin/seq2seq-train" "$@" --threads "$threads" --save "$out/$name.json" --metrics "$out/$name.jsonl")
  rm -f "$out/$name.jsonl"
  echo "== $name"
  echo "\$ seq2seq-train $* --threads $threads --save $name.json --metrics $name.jsonl"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  # CPU time beside the wall time: on a shared machine the process' CPU time is what a quiet one would take
  /usr/bin/time -f "wall time %e s, CPU time %U s user + %S s system" "${cmd[@]}"
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
}

reverse_args=(--task reverse --vocab-size 26 --min-len 5 --max-len 20 --train-size 50000 --valid-size 1000
              --model lstm --hidden 128 --embed 64 --batch 64 --lr 0.003 --clip 1 --log-every 250)
if [[ "$what" == reverse || "$what" == all ]]; then
  train reverse "${reverse_args[@]}" --attention additive --schedule cosine --steps "$(steps 1250)"
fi
if [[ "$what" == bottleneck || "$what" == all ]]; then
  long=(--task reverse --vocab-size 26 --min-len 30 --max-len 40 --train-size 50000 --valid-size 1000
        --model lstm --hidden 128 --embed 64 --batch 64 --lr 0.003 --clip 1 --log-every 250 --steps "$(steps 500)")
  train bottleneck-none "${long[@]}" --attention none
  train bottleneck-additive "${long[@]}" --attention additive
fi
if [[ "$what" == dates || "$what" == all ]]; then
  train dates --task dates --train-size 50000 --valid-size 1000 --model lstm --attention additive --hidden 128 \
    --embed 64 --batch 64 --lr 0.003 --clip 1 --log-every 250 --steps "$(steps 1500)"
fi

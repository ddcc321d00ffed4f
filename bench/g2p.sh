#!/usr/bin/env bash
# Grapheme-to-phoneme on the CMU Pronouncing Dictionary (Debian's festlex-cmu), issue 10's real-data example:
# examples/06-g2p-data/prepare.sh writes train/valid/test TSV (split by word), seq2seq-train trains an LSTM
# encoder-decoder with attention (spelling by characters -> phonemes by spaces), and build/bench/seq2seq_eval
# scores the held-out test words by greedy decoding: PER (edit distance to the closest pronunciation /
# its length) and WER (words whose prediction equals none of their pronunciations).
# The training curve (validation loss, token accuracy and line-level exact match every --log-every steps) is in
# $ATTNKIT_BENCH_OUT/g2p.jsonl; the target is WER <= 30% within 30 minutes of training on 2 cores (met: 29.7% after
# the default 12000 steps, 961 s on a quiet machine; docs/seq2seq-train.md). The cosine schedule lasts --steps.
#
# The curve's validation set is every 5th line of valid.tsv (about 1000 pronunciations, spread over the alphabet),
# to keep the periodic greedy decoding cheap; the final figures are on all of test.tsv.
#
# Usage: bench/g2p.sh [--steps N] [--threads N] [--log-every N] [-- extra seq2seq-train options]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${ATTNKIT_BIN:-$here/../build/bin}"
bench_bin="${ATTNKIT_BENCH_BIN:-$here/../build/bench}"
out="${ATTNKIT_BENCH_OUT:-/tmp/seq2seq-g2p}"
steps=12000
threads=2
log_every=1000
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --log-every) log_every="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "g2p.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
if [[ ! -s "$out/data/train.tsv" ]]; then
  "$here/../examples/06-g2p-data/prepare.sh" "$out/data"
fi
awk 'NR % 5 == 0' "$out/data/valid.tsv" > "$out/data/valid-curve.tsv"
args=(--train "$out/data/train.tsv" --valid "$out/data/valid-curve.tsv" --tokenizer char --target-tokenizer space
      --model lstm --attention additive --bidirectional --hidden 128 --embed 64 --dropout 0.1
      --batch 64 --lr 0.003 --schedule cosine --warmup 200 --clip 1 --steps "$steps" --log-every "$log_every" --threads "$threads" "${extra[@]}")
echo "\$ seq2seq-train ${args[*]} --save g2p.json --metrics g2p.jsonl"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -f "$out/g2p.jsonl"
t0=$(date +%s.%N)
"$bin/seq2seq-train" "${args[@]}" --save "$out/g2p.json" --metrics "$out/g2p.jsonl"
t1=$(date +%s.%N)
echo "training wall time: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f s", b - a }'); load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "\$ seq2seq_eval --model g2p.json --train train.tsv --test test.tsv --tokenizer char --target-tokenizer space"
"$bench_bin/seq2seq_eval" --model "$out/g2p.json" --train "$out/data/train.tsv" --test "$out/data/test.tsv" \
  --tokenizer char --target-tokenizer space --threads "$threads" --show 5

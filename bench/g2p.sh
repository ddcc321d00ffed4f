#!/usr/bin/env bash
# Grapheme-to-phoneme on the CMU Pronouncing Dictionary (Debian's festlex-cmu), a real-data example:
# examples/06-g2p-data/prepare.sh writes train/valid/test TSV (split by word), seq2seq-train trains an LSTM
# encoder-decoder with attention (spelling by characters -> phonemes by spaces), and seq2seq-eval
# (docs/seq2seq-eval.md) scores the held-out test words by greedy decoding: PER (edit distance to the closest pronunciation /
# its length) and WER (words whose prediction equals none of their pronunciations).
# The training curve (validation loss, token accuracy and line-level exact match every --log-every steps) is in
# $ATTNKIT_BENCH_OUT/g2p.jsonl; the target is WER <= 30% within 30 minutes of training on 2 cores (the figures of a run
# of the default 12000 steps are in docs/seq2seq-train.md). The cosine schedule lasts --steps.
#
# The curve's validation set is every 5th line of valid.tsv (about 1000 pronunciations, spread over the alphabet),
# to keep the periodic greedy decoding cheap; the final figures are on all of test.tsv.
#
# --transformer trains a Transformer instead (3 + 3 layers, d 128, 4 heads, ff 512, label smoothing 0.1, lr 0.0015,
# 500 warmup steps), to compare the two at the same training time (docs/transformer.md); give --steps to fit it.
#
# Usage: bench/g2p.sh [--transformer] [--steps N] [--threads N] [--log-every N] [-- extra seq2seq-train options]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${ATTNKIT_BIN:-$here/../build/bin}"
out="${ATTNKIT_BENCH_OUT:-/tmp/seq2seq-g2p}"
steps=12000
threads=2
model=lstm
log_every=1000
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --log-every) log_every="$2"; shift 2 ;;
    --transformer) model=transformer; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "g2p.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
if [[ ! -s "$out/data/train.tsv" ]]; then
  "$here/../examples/06-g2p-data/prepare.sh" "$out/data"
fi
awk 'NR % 5 == 0' "$out/data/valid.tsv" > "$out/data/valid-curve.tsv"
if [[ $model == lstm ]]; then
  model_args=(--model lstm --attention additive --bidirectional --hidden 128 --embed 64 --dropout 0.1 --lr 0.003
              --warmup 200)
else
  model_args=(--model transformer --layers 3 --heads 4 --d-model 128 --ff 512 --dropout 0.1 --label-smoothing 0.1
              --lr 0.0015 --warmup 500)
fi
name=g2p
[[ $model == lstm ]] || name=g2p-transformer
args=(--train "$out/data/train.tsv" --valid "$out/data/valid-curve.tsv" --tokenizer char --target-tokenizer space
      "${model_args[@]}" --batch 64 --schedule cosine --clip 1 --steps "$steps" --log-every "$log_every"
      --threads "$threads" "${extra[@]}")
echo "\$ seq2seq-train ${args[*]} --save $name.json --metrics $name.jsonl"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -f "$out/$name.jsonl"
t0=$(date +%s.%N)
"$bin/seq2seq-train" "${args[@]}" --save "$out/$name.json" --metrics "$out/$name.jsonl"
t1=$(date +%s.%N)
echo "training wall time: $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f s", b - a }'); load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "\$ seq2seq-eval $name.json test.tsv --show 5 --format table"
"$bin/seq2seq-eval" "$out/$name.json" "$out/data/test.tsv" --threads "$threads" --show 5 --format table

#!/usr/bin/env bash
# Accuracy of the recurrent encoder-decoder in lower precision on grapheme-to-phoneme (examples/06-g2p-data, the
# CMU dictionary): trains bench/g2p.sh's LSTM (bidirectional encoder, additive attention, hidden 128, embed 64) with
# a cosine schedule of --steps steps, or takes --checkpoint, then scores the held-out test words with seq2seq-eval
# in fp32, bf16 and int8, greedy and beam (--beam), and prints a Markdown table of WER and PER (percent) with each
# one's difference from fp32. The figures are deterministic (the same on a busy machine); the timings are not
# reported.
#
# Usage: bench/precision_g2p.sh [--steps N] [--threads N] [--beam K] [--checkpoint MODEL.json]
#   (output folder: $ATTNKIT_BENCH_OUT, default /tmp/precision-g2p; binaries: $ATTNKIT_BIN, default build/bin)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${ATTNKIT_BIN:-$here/../build/bin}"
out="${ATTNKIT_BENCH_OUT:-/tmp/precision-g2p}"
steps=1500
threads=2
beam=4
checkpoint=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --beam) beam="$2"; shift 2 ;;
    --checkpoint) checkpoint="$2"; shift 2 ;;
    *) echo "precision_g2p.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
if [[ ! -s "$out/data/train.tsv" ]]; then
  "$here/../examples/06-g2p-data/prepare.sh" "$out/data"
fi
if [[ -z "$checkpoint" ]]; then
  awk 'NR % 5 == 0' "$out/data/valid.tsv" > "$out/data/valid-curve.tsv"
  checkpoint="$out/g2p.json"
  args=(--train "$out/data/train.tsv" --valid "$out/data/valid-curve.tsv" --tokenizer char --target-tokenizer space
        --model lstm --attention additive --bidirectional --hidden 128 --embed 64 --dropout 0.1 --lr 0.003 --warmup 200
        --batch 64 --schedule cosine --clip 1 --steps "$steps" --log-every 500 --threads "$threads")
  echo "\$ seq2seq-train ${args[*]} --save g2p.json" >&2
  "$bin/seq2seq-train" "${args[@]}" --save "$checkpoint" --metrics "$out/g2p.jsonl" > /dev/null
fi

echo "| precision | search | WER % | PER % | WER - fp32 | PER - fp32 |"
echo "|---|---|---:|---:|---:|---:|"
for search in greedy beam; do
  search_args=(--strategy greedy)
  [[ $search == beam ]] && search_args=(--strategy beam --beam "$beam")
  base_wer="" base_per=""
  for precision in fp32 bf16 int8; do
    echo "\$ seq2seq-eval g2p.json test.tsv ${search_args[*]} --precision $precision" >&2
    "$bin/seq2seq-eval" "$checkpoint" "$out/data/test.tsv" "${search_args[@]}" --precision "$precision" \
      --threads "$threads" -o "$out/eval-$search-$precision.json"
    read -r wer per < <(python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(100 * r["wer"], 100 * r["per"])' \
      "$out/eval-$search-$precision.json")
    [[ $precision == fp32 ]] && base_wer="$wer" base_per="$per"
    label="$search"
    [[ $search == beam ]] && label="beam $beam"
    awk -v p="$precision" -v s="$label" -v w="$wer" -v e="$per" -v bw="$base_wer" -v be="$base_per" \
      'BEGIN { printf "| %s | %s | %.2f | %.2f | %+.2f | %+.2f |\n", p, s, w, e, w - bw, e - be }'
  done
done

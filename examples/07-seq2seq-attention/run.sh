#!/usr/bin/env bash
# shows: a recurrent seq2seq trained to reverse sequences, with attention and without (the fixed context)
# The documents' encoder-decoder, trained from scratch in seconds: seq2seq-train learns to reverse sequences
# of 3 to 12 tokens, once with attention (LSTM encoder and decoder, dot score, Luong style) and once without
# (attention none: the encoder's last state is all the decoder gets, the documents' fixed context). Greedy
# decoding of 200 held-out sequences (never seen in training) is scored by exact match every 200 steps.
# One thread, so that the run is the same on every machine of one kind. The longer runs (lengths 30-40, where
# the fixed context falls far behind) are bench/seq2seq_quality.sh's, with figures in docs/seq2seq-train.md.
# With --check, compares what it prints against expected.txt (a ctest case).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../lib/common.sh"
walk() {
  cd "$work"
  for attention in dot none; do
    run "seq2seq-train --task reverse --vocab-size 8 --min-len 3 --max-len 12 --train-size 4000 --valid-size 200 --model lstm --attention $attention --hidden 48 --embed 16 --batch 32 --lr 0.01 --schedule cosine --steps 800 --log-every 200 --threads 1 --save $attention.json --metrics $attention.jsonl > /dev/null"
    # the held-out exact match (greedy decoding equals the reversed sequence) as training goes
    run_figures "grep -o '\"exact_match\":[0-9.e-]*\\|\"step\":[0-9]*' $attention.jsonl | paste -d' ' - - | awk '{ split(\$1, a, \":\"); split(\$2, b, \":\"); printf \"step %d: exact match %.1f%%\\n\", b[2], 100 * a[2] }' | tee $attention.txt"
    # the figures' last bits depend on the processor's GEMM kernel; the claim does not
    run "tail -n 1 $attention.txt | awk '{ sub(\"%\", \"\", \$5); print (\$5 + 0 >= 90 ? \"above\" : \"below\"), \"90% exact match after 800 steps\" }'"
  done
  # the checkpoint (one JSON bundle) holds the config, the vocabulary, the weights and the optimizer's state;
  # `lstm-run x.json --weights dot.json#encoder` runs its trained encoder
  run "grep -o '\"config\":{[^}]*}' dot.json"
  # the attention model decodes a sequence and draws where each output step looked (its cross-attention)
  run "transformer-decode dot.json --src '3 1 4 1 5 2 6 7' --attention --heatmap align.svg > align.json && grep -o '\"text\":\"[^\"]*\"' align.json"
  python3 - <<'PY'
import json
a = json.load(open("align.json"))["attention"]  # [output steps + <eos>, S]
S = len(a[0])
hits = sum(1 for t in range(S) if max(range(S), key=lambda s: a[t][s]) == S - 1 - t)
print(f"output step t looks hardest at source position {S + 1} - t (the anti-diagonal of align.svg): {hits} of {S} steps")
PY
  keep align.svg
}
walk_or_check "$@"

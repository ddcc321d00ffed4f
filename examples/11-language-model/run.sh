#!/usr/bin/env bash
# shows: a character language model trained on the King James Genesis in seconds, and text sampled from it
# The book of Genesis from Debian's bible-kjv-text (the `bible` reader of bible-kjv prints it), verse references
# removed: 1400 verses to train on, the last 133 to validate. A 2-layer decoder-only Transformer (pre-LN, d_model
# 64, 4 heads, context 64, char tokens) trained for 300 steps of 16 random windows reaches below 3.5 bits per byte
# on the validation verses (the training text's character frequencies alone give 4.4); then transformer-decode
# continues a prompt by sampling. Longer runs: docs/language-models.md.
# With --check, compares what it prints against expected.txt (a ctest case; skipped, exit 77, when bible-kjv
# is not installed); the losses and the sample are figures, left out of the comparison.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v bible > /dev/null || ! dpkg -L bible-kjv-text 2>/dev/null | grep -q '/bible.data$'; then
  echo "11-language-model: skipped: bible-kjv and bible-kjv-text are not installed (scripts/setup.sh installs them)" >&2
  exit 77
fi
source "$here/../lib/common.sh"
walk() {
  cd "$work"
  export LC_ALL=C
  run "bible -f Gen1:1-Gen50:26 | sed 's/^[A-Za-z0-9]*:[0-9]* //' > genesis.txt; head -n 2 genesis.txt"
  run "head -n 1400 genesis.txt > train.txt; tail -n +1401 genesis.txt > valid.txt; wc -c train.txt valid.txt"
  run "seq2seq-train --model transformer-lm --train train.txt --valid valid.txt --context 64 --layers 2 \\
    --d-model 64 --heads 4 --ff 256 --batch 16 --lr 0.003 --schedule cosine --warmup 20 --steps 300 \\
    --threads 1 --log-every 100 --save genesis.json --metrics genesis.jsonl > summary.json"
  # validation bits per byte after each 100 steps, then the claim
  run_figures "grep -o '\"valid_bpb\":[0-9.]*' genesis.jsonl"
  run "python3 -c \"import json; print('below 3.5 bits per byte:', json.load(open('summary.json'))['valid_bpb'] < 3.5)\""
  # a sample: 48 characters after the prompt (temperature 0.8, seed 1)
  run_figures "transformer-decode genesis.json --prompt 'And God said' --max-new-tokens 48 --strategy sample \\
    --temperature 0.8 --seed 1 | python3 -c 'import json, sys; print(json.load(sys.stdin)[\"text\"])'"
}
walk_or_check "$@"

#!/usr/bin/env bash
# seq2seq-train refuses, before allocating, a model whose parameters with their gradients and optimizer state
# are estimated above 8 GiB (exit 2, the estimate and the options named), in a moment and without a file.
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

base=(--task reverse --steps 1 --threads 1 --save m.json)
expect_error 2 "GiB) with gradients and optimizer state, more than the limit of 8 GiB (from --layers 16 --hidden 8192)" \
  timeout 20 seq2seq-train "${base[@]}" --model lstm --layers 16 --hidden 8192
expect_error 2 "more than the limit of 8 GiB (from --d-model 65536 --ff 262144)" \
  timeout 20 seq2seq-train "${base[@]}" --model transformer --d-model 65536 --ff 262144
expect_error 2 "the model would have about 6e+12 parameters" timeout 20 seq2seq-train "${base[@]}" --model gru --hidden 1000000
expect_error 2 "more than the limit of 8 GiB (from --embed 1000000000)" \
  timeout 20 seq2seq-train "${base[@]}" --model lstm --embed 1000000000
# language models too
printf 'the cat sat on the mat\n' > text.txt
lm=(--train text.txt --context 4 --steps 1 --threads 1 --save m.json)
expect_error 2 "more than the limit of 8 GiB (from --d-model 65536 --ff 262144)" \
  timeout 20 seq2seq-train "${lm[@]}" --model transformer-lm --d-model 65536 --ff 262144
expect_error 2 "more than the limit of 8 GiB (from --layers 16 --hidden 100000)" \
  timeout 20 seq2seq-train "${lm[@]}" --model lstm-lm --layers 16 --hidden 100000
[[ ! -e m.json ]] || fail "a refused model size left a checkpoint"
# a model well inside the limit trains
seq2seq-train "${base[@]}" --model lstm --layers 2 --hidden 64 --embed 32 > /dev/null || fail "a small model exited $?"

finish seq2seq_train_sizes

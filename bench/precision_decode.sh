#!/usr/bin/env bash
# The Transformer's decoding in float32, bfloat16 and int8 weights (transformer-decode --precision): a 6+6-layer
# d 512 Transformer (random weights: the speed does not depend on them), greedy tokens/s at batch 1 and 64 and
# the weights streamed per second, and one encoder layer [16, 256, 512], the precisions in paired, interleaved
# rounds (build/bench/precision_bench, bench/precision_bench.cpp). Needs a quiet machine: nothing else running.
#   bench/precision_decode.sh [--quick] [precision_bench options: --rounds 7 --threads 1 ...]
# --quick: a 1+1-layer d 64 model, a few tokens, one round (checks that it runs; its figures mean nothing).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bench="$root/build/bench/precision_bench"
[[ -x "$bench" ]] || cmake --build "$root/build" --target precision_bench >&2
args=(--layers 6 --d 512 --heads 8 --ff 2048 --vocab 8000 --src-len 32 --tokens 64 --batch 64 --enc-batch 16
      --enc-len 256 --rounds 5 --threads 2)
if [[ "${1:-}" == --quick ]]; then
  shift
  args=(--layers 1 --d 64 --heads 2 --ff 128 --vocab 50 --src-len 6 --tokens 4 --batch 4 --enc-batch 2 --enc-len 16
        --rounds 1 --threads 1)
fi
# (later options override the defaults above)
exec "$bench" "${args[@]}" "$@"

#!/usr/bin/env bash
# The floors hold (scripts/check_layers.sh over this tree), and the check can fail: on a small tree with
# an upward and a sideways include it names both, with file and line, and exits 1.
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
check="$ATTNKIT_SOURCE/scripts/check_layers.sh"

bash "$check" "$ATTNKIT_SOURCE"

mkdir -p "$work/lib/attnkit/ops" "$work/lib/attnkit/nn" "$work/lib/attnkit/train" "$work/lib/attnkit/decode" \
         "$work/tools"
printf '#include "attnkit/tensor/tensor.hpp"\n#include "attnkit/nn/linear.hpp"\n' > "$work/lib/attnkit/ops/gemm.cpp"
printf '#include "attnkit/ops/gemm.hpp"\n#include "attnkit/version.hpp"\n' > "$work/lib/attnkit/nn/linear.hpp"
printf '// a comment\n\n#include "attnkit/train/vocab.hpp"\n' > "$work/lib/attnkit/decode/search.cpp"
printf '#include "attnkit/decode/search.hpp"\n' > "$work/tools/decode.cpp"
printf '#include "attnkit/models/model.hpp"\n' > "$work/lib/attnkit/train/vocab.hpp"
if bash "$check" "$work" 2> "$work/err"; then
  echo "FAIL: check_layers passed a tree with an upward and a sideways include" >&2; exit 1
fi
expect=("lib/attnkit/ops/gemm.cpp:2: ops includes nn (upward"
        "lib/attnkit/decode/search.cpp:3: decode includes train (sideways")
for e in "${expect[@]}"; do
  grep -qF "$e" "$work/err" || { echo "FAIL: check_layers did not say '$e'; it said:" >&2; cat "$work/err" >&2; exit 1; }
done
lines=$(grep -c "includes" "$work/err")
[[ "$lines" == 2 ]] || { echo "FAIL: expected 2 broken includes, check_layers reported $lines:" >&2; cat "$work/err" >&2; exit 1; }
echo "layering: 1 passed, 0 failed"

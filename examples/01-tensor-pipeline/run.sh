#!/usr/bin/env bash
# shows: tensors on the wire: make, show, reshape, pack a bundle, pick a member, compare
# Tensors on the wire: make a tensor, look at it, reshape it, pack a bundle, pick a member, compare.
# With --check, compares what it prints against expected.txt (a ctest case).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../lib/common.sh"
walk() {
  cd "$work"
  run "tensor linspace -0.4 1.2 --shape 3,4 | tensor show -"
  run "tensor linspace -0.4 1.2 --shape 3,4 > x.json && tensor reshape x.json --shape 2,-1 | tensor show -"
  run "tensor arange 6 --shape 2,3 | tensor transpose - > xt.json && tensor show xt.json"
  run "tensor pack x=x.json xt=xt.json > bundle.json && tensor get bundle.json#xt --format flat"
  run "tensor randn --shape 2,3 --seed 7 | tensor show -"
  run "tensor diff x.json x.json && echo same"
  run "tensor diff x.json xt.json --quiet || echo \"differ (exit \$?)\""
}
walk_or_check "$@"

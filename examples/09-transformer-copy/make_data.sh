#!/usr/bin/env bash
# make_data.sh N SEED: N lines "a b c ... (10 tokens) TAB the same", tokens 1..10 drawn by the Park-Miller
# generator x = 16807 x mod (2^31 - 1) (exact in awk's doubles, so every awk writes the same file).
set -euo pipefail
awk -v n="$1" -v x="$2" 'BEGIN {
  for (i = 0; i < n; i++) {
    line = ""
    for (j = 0; j < 10; j++) { x = (16807 * x) % 2147483647; line = line (j ? " " : "") (1 + x % 10) }
    print line "\t" line
  }
}'

#!/usr/bin/env bash
# rounded.sh REF: the tensor's shape, then its values to 4 decimals, one row (last axis) a line.
# (The last digits of float32 results move with the GEMM kernel's summation order, AVX2 vs
# AVX-512; 4 decimals are the same everywhere.)
set -euo pipefail
tensor get "$1" --format flat | awk '{
  match($0, /"shape":\[[^]]*\]/); shape = substr($0, RSTART + 9, RLENGTH - 10)
  match($0, /"data":\[[^]]*\]/); n = split(substr($0, RSTART + 8, RLENGTH - 9), v, ",")
  k = split(shape, s, ","); w = s[k]
  print "shape [" shape "]"
  line = ""
  for (i = 1; i <= n; i++) {
    x = sprintf("%.4f", v[i]); if (x == "-0.0000") x = "0.0000"
    line = line (line == "" ? "" : " ") sprintf("%8s", x)
    if (i % w == 0) { print line; line = "" }
  }
}'

#!/usr/bin/env bash
# shows: the first document's attention: s0 against h1..h4 (scores, softmax, context c1), then with a real LSTM encoder
# The first document's attention example: the decoder state s0 is scored against the encoder's
# hidden states h1..h4 (e11..e14), the scores go through a softmax (a11..a14), and the context is
# the weighted sum c1 = a11 h1 + a12 h2 + a13 h3 + a14 h4. The document's figures were lost, so the
# states are small made-up 3-dim vectors (h.json, s0.json); the score is the plain dot product.
# Then the same states attend to each other under a causal mask (masked self-attention), and
# finally a real LSTM encoder (lstm-run) provides h1..h4 and s0 = its last hidden state.
# Every number attn-score prints is checked against an independent awk computation.
# With --check, compares what it prints against expected.txt (a ctest case).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../lib/common.sh"
# flat data of a tensor (reference), one number per line
numbers() { tensor get "$1" --format flat | sed 's/.*"data":\[\(.*\)\].*/\1/' | tr ',' '\n'; }
# prints the numbers rounded to 4 decimals on one line (float32's last digit may differ across CPUs)
round4() { awk '{ printf "%s%.4f", (NR > 1 ? " " : ""), $1 } END { print "" }'; }
walk() {
  cd "$work"
  cp "$here/h.json" "$here/s0.json" .
  echo "# encoder states h1..h4 (rows) and the decoder state s0"
  run "tensor show h.json"
  run "tensor show s0.json"
  echo
  echo "# score, softmax, context in one call (values default to the keys: c1 = sum_j a1j hj)"
  run "attn-score --query s0.json --keys h.json --score dot -o step1.json"
  echo "e11..e14 = $(numbers step1.json#scores | round4)"
  echo "a11..a14 = $(numbers step1.json#weights | round4)"
  echo "c1       = $(numbers step1.json#context | round4)"
  echo
  echo "# independent check (awk): e1j = s0 . hj, a1j = exp(e1j) / sum_k exp(e1k), c1 = sum_j a1j hj"
  awk 'NR == FNR { s[NR] = $1; next } { h[FNR] = $0 }
       END {
         for (j = 1; j <= 4; j++) { split(h[j], x, " "); e[j] = 0; for (i = 1; i <= 3; i++) e[j] += s[i] * x[i]; z += exp(e[j]) }
         for (j = 1; j <= 4; j++) { a[j] = exp(e[j]) / z; split(h[j], x, " "); for (i = 1; i <= 3; i++) c[i] += a[j] * x[i] }
         printf "e = %.4f %.4f %.4f %.4f\n", e[1], e[2], e[3], e[4]
         printf "a = %.4f %.4f %.4f %.4f\n", a[1], a[2], a[3], a[4]
         printf "c = %.4f %.4f %.4f\n", c[1], c[2], c[3]
       }' <(numbers s0.json) <(numbers h.json | paste -d' ' - - -) > awk.txt
  cat awk.txt
  {
    echo "e = $(numbers step1.json#scores | round4)"
    echo "a = $(numbers step1.json#weights | round4)"
    echo "c = $(numbers step1.json#context | round4)"
  } > ours.txt
  if diff -q awk.txt ours.txt > /dev/null; then echo "check: attn-score agrees with awk to 4 decimals"; else echo "check: MISMATCH"; diff awk.txt ours.txt; fi
  echo
  echo "# the weights as a heatmap a browser shows"
  run "attn-score --query s0.json --keys h.json --score dot --heatmap s0.svg --query-labels s0 --key-labels h1,h2,h3,h4 > /dev/null"
  echo "s0.svg: $(grep -c '<rect x=.*<title>' s0.svg) cells, key labels: $(grep -o '>h[1-4]<' s0.svg | tr -d '<>' | paste -sd' ')"
  echo
  echo "# masked self-attention over h1..h4: position t sees h1..ht only (scaled dot, causal mask)"
  run "attn-score --query h.json --keys h.json --mask causal -o step2.json"
  echo "weights (row t = query t):"
  numbers step2.json#weights | round4 | awk '{ for (r = 0; r < 4; r++) { for (c = 1; c <= 4; c++) printf "%s%s", $(r * 4 + c), (c < 4 ? " " : "\n") } }'
  echo "masked scores are -Infinity: $(numbers step2.json#scores | grep -c Infinity) of 16 (the 6 above the diagonal)"
  echo
  echo "# with a real encoder: an LSTM reads 4 inputs; s0 is its last hidden state h_n (as in the document)"
  run "tensor randn --shape 4,3 --seed 1 | lstm-run - --init --input-size 3 --hidden-size 4 --seed 1 > enc.json"
  run "attn-score --query enc.json#h_n --keys enc.json#output --score dot -o step3.json"
  numbers step3.json#weights | awk '{ s += $1 } END { printf "a11..a14 sum to 1: %s\n", (s > 0.999999 && s < 1.000001) ? "yes" : "no" }'
  # c1 = sum_j a1j hj, recomputed from the printed weights and the LSTM outputs
  paste -d' ' <(numbers enc.json#output | paste -d' ' - - - -) <(numbers step3.json#weights) |
    awk '{ for (i = 1; i <= 4; i++) c[i] += $5 * $i } END { printf "%.4f %.4f %.4f %.4f\n", c[1], c[2], c[3], c[4] }' > c_awk.txt
  numbers step3.json#context | round4 > c_ours.txt
  if diff -q c_awk.txt c_ours.txt > /dev/null; then echo "c1 = sum_j a1j hj: agrees with awk"; else echo "c1: MISMATCH"; fi
  keep s0.svg
}
walk_or_check "$@"

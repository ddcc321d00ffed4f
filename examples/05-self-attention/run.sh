#!/usr/bin/env bash
# shows: self-attention, masked (causal) self-attention and multi-head attention on "the cat sat on the mat"
# The first document's self-attention on a short sentence: only X is given, Q = X W_Q, K = X W_K, V = X W_V,
# A = softmax(Q Kᵀ / √E), Y = A V (attn-score --self in the documents' own weight form, one head). Its tip:
# self-attention does not see the order (the two "the" get the same row; reversing the words reverses the
# outputs), so positions are added (the second document's sinusoidal encoding, computed here with awk).
# Then masked self-attention (a word sees itself and the words before it) and multi-head attention, both
# ways of the second document's section 10: projections (PyTorch nn.MultiheadAttention names, 2 heads) and
# splitting. The word vectors and weights are seeded random numbers; the weights printed with 3 decimals
# (float32's last digit may differ across processors) and the first ones checked by an awk computation.
# Heatmaps: self.svg, causal.svg, heads.svg (the walkthrough keeps them).
# With --check, compares what it prints against expected.txt (a ctest case).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../lib/common.sh"
# flat data of a tensor (reference), one number per line
numbers() { tensor get "$1" --format flat | sed 's/.*"data":\[\(.*\)\].*/\1/' | tr ',' '\n'; }
words=(the cat sat on the mat)
labels="the,cat,sat,on,the,mat"
# matrix REF: a [6, 6] weight matrix, one row per query word, 3 decimals
matrix() {
  numbers "$1" | awk -v words="${words[*]}" 'BEGIN { n = split(words, w, " "); printf "%-5s", ""; for (j = 1; j <= n; j++) printf "%7s", w[j]; print "" }
    { r = int((NR - 1) / n) + 1; if ((NR - 1) % n == 0) printf "%-5s", w[r]; printf "%7.3f", $1; if (NR % n == 0) print "" }'
}
walk() {
  cd "$work"
  echo "# the sentence: one 8-dim vector per word (a made-up embedding table, a seeded vector per word), X [T=6, E=8]"
  run "tensor pack the=<(tensor randn --shape 8 --seed 1) cat=<(tensor randn --shape 8 --seed 2) sat=<(tensor randn --shape 8 --seed 3) \\
    on=<(tensor randn --shape 8 --seed 4) mat=<(tensor randn --shape 8 --seed 5) > embedding.json"
  run "tensor stack embedding.json#the embedding.json#cat embedding.json#sat embedding.json#on embedding.json#the embedding.json#mat > x.json"
  echo
  echo "# self-attention, the first document's form: W_Q, W_K, W_V [E, E], applied as X W (one head)"
  run "tensor pack W_Q=<(tensor randn --shape 8,8 --seed 11 --std 0.35) W_K=<(tensor randn --shape 8,8 --seed 12 --std 0.35) \\
    W_V=<(tensor randn --shape 8,8 --seed 13 --std 0.35) > qkv.json"
  run "attn-score --self x.json --heads 1 --weights qkv.json --need-weights --heatmap self.svg --query-labels $labels --key-labels $labels > self.json"
  echo "weights A (row: the query word; each row sums to 1):"
  matrix self.json#weights
  # independent check (awk, in double): Q = X W_Q, K = X W_K, A = softmax(Q Kᵀ / √8), within 1e-4
  numbers x.json > x.txt
  { numbers qkv.json#W_Q; numbers qkv.json#W_K; } > w.txt
  awk 'NR == FNR { w[NR - 1] = $1; next } { x[FNR - 1] = $1 }
       END {
         for (t = 0; t < 6; t++) for (j = 0; j < 8; j++) { q[t, j] = 0; k[t, j] = 0
           for (i = 0; i < 8; i++) { q[t, j] += x[t * 8 + i] * w[i * 8 + j]; k[t, j] += x[t * 8 + i] * w[64 + i * 8 + j] } }
         for (t = 0; t < 6; t++) { z = 0
           for (s = 0; s < 6; s++) { e = 0; for (j = 0; j < 8; j++) e += q[t, j] * k[s, j]; a[s] = exp(e / sqrt(8)); z += a[s] }
           for (s = 0; s < 6; s++) printf "%.4f\n", a[s] / z }
       }' w.txt x.txt > awk.txt
  numbers self.json#weights | awk '{ printf "%.4f\n", $1 }' > ours.txt
  if paste awk.txt ours.txt | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1.01e-4) bad = 1 } END { exit bad }'; then
    echo "check: A agrees with awk (Q = X W_Q, K = X W_K, softmax(Q Kᵀ / √8)) within 1e-4"
  else echo "check: MISMATCH"; paste awk.txt ours.txt; fi
  # the two "the" (rows 1 and 5) attend alike: nothing tells them apart
  row() { numbers "$1" | awk -v r="$2" 'int((NR - 1) / 6) == r - 1' | paste -sd' '; }
  [[ "$(row self.json#output 1)" == "$(row self.json#output 5)" ]] && echo "the outputs of the two \"the\" (rows 1 and 5) are equal: self-attention does not see the order"
  echo
  echo "# the document's tip: permute the inputs and the outputs are permuted the same way (here: the sentence reversed)"
  run "tensor get x.json --index '::-1' > reversed.json && attn-score --self reversed.json --heads 1 --weights qkv.json > reversed_out.json"
  run "tensor get self.json#output --index '::-1' | tensor diff - reversed_out.json#output --rtol 1e-5 --atol 1e-6 --quiet && echo 'the outputs, reversed'"
  echo
  echo "# so positions are added: X + PE, PE[pos, 2i] = sin(pos / 10000^(2i/E)), PE[pos, 2i+1] = cos(pos / 10000^(2i/E)) (awk)"
  numbers x.json | awk '{ p = int((NR - 1) / 8); c = (NR - 1) % 8; f = p / 10000 ^ (2 * int(c / 2) / 8)
    v[NR] = $1 + (c % 2 ? cos(f) : sin(f)) }
    END { printf "{\"shape\":[6,8],\"data\":["; for (i = 1; i <= NR; i++) printf "%s%.9g", (i > 1 ? "," : ""), v[i]; print "]}" }' > xp.json
  run "attn-score --self xp.json --heads 1 --weights qkv.json --need-weights > positions.json"
  [[ "$(row positions.json#output 1)" != "$(row positions.json#output 5)" ]] && echo "with positions, the two \"the\" differ: rows 1 and 5 of A"
  matrix positions.json#weights | sed -n '1p;2p;6p'
  echo
  echo "# masked self-attention: word t sees words 1..t only (causal mask: the weights above the diagonal are 0)"
  run "attn-score --self xp.json --heads 1 --weights qkv.json --mask causal --need-weights --heatmap causal.svg --query-labels $labels --key-labels $labels > causal.json"
  matrix causal.json#weights
  echo
  echo "# multi-head attention, by projection: 2 heads of 4 dims, PyTorch's nn.MultiheadAttention weights (in_proj_weight [3E, E], out_proj.weight [E, E])"
  run "tensor pack in_proj_weight=<(tensor randn --shape 24,8 --seed 21 --std 0.35) out_proj.weight=<(tensor randn --shape 8,8 --seed 22 --std 0.35) > mha.json"
  run "attn-score --self xp.json --heads 2 --weights mha.json --per-head --heatmap heads.svg --query-labels $labels --key-labels $labels > heads.json"
  echo "heads.svg: $(grep -o '>n = 0, head [0-9]<' heads.svg | tr -d '<>' | paste -sd' ' | sed 's/n = 0, //g; s/ head/, head/g'), $(grep -c '<rect x=.*<title>' heads.svg) cells"
  # the word each word attends to most, in each head (word(position)): the heads look at different words
  most() {
    numbers "$1" | awk -v words="${words[*]}" -v heads="$2" 'BEGIN { split(words, w, " ") }
      { i = NR - 1; h = int(i / 36); t = int((i % 36) / 6); s = i % 6
        if (s == 0 || $1 > best[h, t]) { best[h, t] = $1; arg[h, t] = w[s + 1] "(" s + 1 ")" } }
      END { printf "%-8s", "query"; for (h = 0; h < heads; h++) printf "%-10s", "head " h; print ""
        for (t = 0; t < 6; t++) { printf "%-8s", w[t + 1]; for (h = 0; h < heads; h++) printf "%-10s", arg[h, t]; print "" } }' | sed 's/ *$//'
  }
  echo "the word each query word weighs most, per head:"
  most heads.json#weights 2
  echo
  echo "# multi-head attention, by splitting (no weights): Q = K = V = X + PE cut into 2 blocks of 4 columns, one scaled dot-product attention each"
  run "attn-score --self xp.json --split-heads --heads 2 --per-head > split.json"
  echo "the word each query word weighs most, per head:"
  most split.json#weights 2
  keep self.svg causal.svg heads.svg
}
walk_or_check "$@"

#!/usr/bin/env bash
# attn-score end to end: score forms, masks, multi-head, pipes from `tensor`, heatmap, and the
# error contract (exit 1 bad input / 2 usage, message on stderr, nothing on stdout).
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

# --- the documents' example: s0 against h1..h4 (dot score), values default to keys
echo '[[1, 0, 1]]' > s0.json
echo '[[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]]' > h.json
attn-score --query s0.json --keys h.json --score dot > r.json
tensor get r.json#scores | grep -qx '\[\[1,0,1,2\]\]' || fail "dot scores: $(cat r.json)"
# weights = softmax([1, 0, 1, 2]) checked independently with awk
tensor get r.json#weights --format flat > w.json
awk 'BEGIN { s = exp(1) + exp(0) + exp(1) + exp(2); printf "%.6f %.6f %.6f %.6f\n", exp(1)/s, 1/s, exp(1)/s, exp(2)/s }' > want.txt
tr -d '{}[]"a-z:' < w.json | tr ',' '\n' | tail -4 | awk '{ printf "%.6f ", $1 } END { print "" }' | sed 's/ $//' > got.txt
diff -q want.txt got.txt >/dev/null || fail "weights $(cat got.txt) != $(cat want.txt)"

# --- a pipe from tensor, references to stdin read once (-#name twice)
tensor randn --shape 2,5,4 --seed 3 > x.json
tensor pack output=x.json > bundle.json
cat bundle.json | attn-score --query x.json --keys -#output --values -#output --mask causal > a.json
attn-score --query x.json --keys x.json --mask causal > b.json
tensor diff a.json b.json --quiet || fail "stdin keys differ from file keys"
tensor randn --shape 5,8 --seed 3 | attn-score --self - --split-heads --heads 2 --per-head > sh.json
tensor get sh.json#weights | tensor show - | grep -q 'shape=\[2, 5, 5\]' || fail "per-head weights shape"
attn-score --self x.json --split-heads --heads 2 > sh2.json
tensor show sh2.json#output | grep -q 'shape=\[2, 5, 4\]' || fail "split-heads output shape"
# no weights without --need-weights / --per-head (the long-sequence path)
lacks '"weights"' "weights printed without --need-weights" attn-score --self x.json --split-heads --heads 2

# the documents' pipeline with a real encoder: s0 = the LSTM's last state h_n, keys = its outputs
if command -v lstm-run > /dev/null; then
  tensor randn --shape 4,3 --seed 1 | lstm-run - --init --input-size 3 --hidden-size 4 --seed 1 > enc.json
  tensor randn --shape 4,3 --seed 1 | lstm-run - --init --input-size 3 --hidden-size 4 --seed 1 |
    attn-score --query -#h_n --keys -#output --score dot > enc_att.json
  attn-score --query enc.json#h_n --keys enc.json#output --score dot > enc_att2.json
  tensor diff enc_att.json enc_att2.json -q || fail "lstm-run pipe differs from the files"
  tensor show enc_att.json#context | grep -q 'shape=\[1, 4\]' || fail "lstm-run pipe context shape"
fi

# causal-lower-right: the last query sees every key
tensor randn --shape 2,4 --seed 1 > q2.json
tensor randn --shape 5,4 --seed 2 > k5.json
attn-score --query q2.json --keys k5.json --mask causal-lower-right > lr_all.json
tensor get lr_all.json#weights --format flat > lr.json
grep -q '"data":\[[^]]*,0,[^]]*\]' lr.json || fail "lower-right should mask the first query's last key: $(cat lr.json)"

# explicit mask (1 = attend) and key lengths; a fully masked row gives zeros, not NaN
echo '[[1, 1, 0, 0, 0], [0, 0, 0, 0, 0]]' > m.json
attn-score --query q2.json --keys k5.json --mask m.json > mm.json
tensor get mm.json#context | grep -q '\[0,0,0,0\]\]$' || fail "fully masked row: $(tensor get mm.json#context)"
lacks NaN "NaN in output" cat mm.json
tensor randn --shape 2,3,4 --seed 5 > q3.json
echo '[5, 2]' > len.json
attn-score --query q3.json --keys x.json --key-lengths len.json > kl.json
tensor get kl.json#weights --format flat | grep -q '"shape":\[2,3,5\]' || fail "key lengths"

# multi-head with nn.MultiheadAttention weights from the golden fixtures
fx="$ATTNKIT_SOURCE/tests/fixtures/attention.json"
attn-score --self "$fx#mha_self/query" --heads 2 --weights "$fx#mha_self/state" --need-weights > mha.json
tensor diff mha.json#output "$fx#mha_self/output" --rtol 1e-4 --atol 1e-5 -q || fail "mha output vs PyTorch"
tensor diff mha.json#weights "$fx#mha_self/weights_avg" --rtol 1e-4 --atol 1e-5 -q || fail "mha weights vs PyTorch"
attn-score --query "$fx#mha_cross_kvdim/query" --keys "$fx#mha_cross_kvdim/key" --values "$fx#mha_cross_kvdim/value" \
  --heads 2 --weights "$fx#mha_cross_kvdim/state" --per-head > cross.json
tensor diff cross.json#output "$fx#mha_cross_kvdim/output" --rtol 1e-4 --atol 1e-5 -q || fail "cross kdim/vdim output"
tensor diff cross.json#weights "$fx#mha_cross_kvdim/weights_per_head" --rtol 1e-4 --atol 1e-5 -q || fail "per-head weights"
attn-score --self "$fx#mha_self_causal/query" --heads 2 --weights "$fx#mha_self_causal/state" --mask causal > c.json
tensor diff c.json#output "$fx#mha_self_causal/output" --rtol 1e-4 --atol 1e-5 -q || fail "causal mha"

# general and additive scores against the fixtures
attn-score --query "$fx#general/q" --keys "$fx#general/k" --values "$fx#general/v" --score general --weights "$fx#general" > g.json
tensor diff g.json#context "$fx#general/context" --rtol 1e-4 --atol 1e-5 -q || fail "general context"
tensor pack W_q="$fx#additive/W_q" W_k="$fx#additive/W_k" v="$fx#additive/v_att" b="$fx#additive/b" > add_w.json
attn-score --query "$fx#additive/q" --keys "$fx#additive/k" --values "$fx#additive/v" --score additive --weights add_w.json > ad.json
tensor diff ad.json#weights "$fx#additive/weights" --rtol 1e-4 --atol 1e-5 -q || fail "additive weights"

# heatmap: written, well formed, labelled
attn-score --query s0.json --keys h.json --score dot --heatmap w.svg --query-labels s0 --key-labels h1,h2,h3,h4 > /dev/null
[[ -s w.svg ]] || fail "heatmap not written"
grep -q '</svg>' w.svg && grep -q '>h4</text>' w.svg && grep -q '>s0</text>' w.svg || fail "heatmap content"
if command -v xmllint > /dev/null; then xmllint --noout w.svg || fail "heatmap is not well-formed XML"; fi
attn-score --self x.json --split-heads --heads 2 --heatmap heads.svg > /dev/null
grep -q 'n = 1' heads.svg || fail "multi-head heatmap panels"

# -o writes atomically; --threads accepted
attn-score --query s0.json --keys h.json -o out.json --threads 1
[[ -s out.json ]] || fail "-o"

# --- bad input: exit 1, message, empty stdout
echo '[[1, 2]]' > q2d.json
expect_error 1 "q2d.json (query) has shape [1, 2] and h.json (keys) [4, 3]: they disagree on the feature size (2 and 3; the scaled-dot score needs them equal): score with --score general" attn-score --query q2d.json --keys h.json
echo '[[1, 1, 1]]' > mbad.json
expect_error 1 "mask has shape [1, 3], expected [T, S] = [1, 4]" attn-score --query s0.json --keys h.json --mask mbad.json
expect_error 1 "NH = 3 heads do not divide" attn-score --self x.json --split-heads --heads 3
expect_error 1 "NH = 3 heads do not divide the embedding size E = 8" attn-score --self "$fx#mha_self/query" --heads 3 --weights "$fx#mha_self/state"
echo '{"in_proj_weight": [[1, 0], [0, 1]]}' > badw.json
expect_error 1 "in_proj_weight has shape [2, 2], expected [3E, E]" attn-score --self x.json --heads 1 --weights badw.json
echo '{"W_q": [[1]]}' > addw.json
expect_error 1 "needs weights member W_k" attn-score --query s0.json --keys h.json --score additive --weights addw.json
expect_error 1 "the general score needs a weight W" attn-score --query s0.json --keys h.json --score general
echo '[1, 2, 3]' > len3.json
expect_error 1 "key lengths has shape [3], expected [2] (one length per sequence)" attn-score --query q3.json --keys x.json --key-lengths len3.json
expect_error 1 "no-such.json" attn-score --query no-such.json --keys h.json

# --- usage errors: exit 2
expect_error 2 "needs --weights" attn-score --self x.json --heads 2
expect_error 2 "give --query and --keys" attn-score --query s0.json
expect_error 2 "--self X replaces" attn-score --self x.json --query s0.json --keys h.json
expect_error 2 "--score" attn-score --query s0.json --keys h.json --score cosine
expect_error 2 "belong to the multi-head forms" attn-score --query s0.json --keys h.json --need-weights
expect_error 2 "--weights is for" attn-score --query s0.json --keys h.json --weights addw.json

# --- backward: --grad-output adds "grad" (PyTorch autograd golden gradients, tests/fixtures/gen_mha_grad.py)
gx="$ATTNKIT_SOURCE/tests/fixtures/mha_grad/mha_grad.json"
attn-score --self "$gx#self_in_proj/x" --heads 2 --weights "$gx#self_in_proj/state" --grad-output "$gx#self_in_proj/dy" > g.json
for name in in_proj_weight in_proj_bias out_proj.weight out_proj.bias; do
  tensor diff "g.json#grad/$name" "$gx#self_in_proj/grad/$name" --rtol 1e-4 --atol 2e-5 -q || fail "grad $name vs PyTorch"
done
tensor diff g.json#grad/self "$gx#self_in_proj/grad/x" --rtol 1e-4 --atol 2e-5 -q || fail "grad of --self X vs PyTorch"
tensor diff g.json#output "$gx#self_in_proj/output" --rtol 1e-4 --atol 2e-5 -q || fail "output with --grad-output"
c=cross_kvdim_padding
tensor get "$gx#$c/key_lengths" > kl.json
attn-score --query "$gx#$c/query" --keys "$gx#$c/key" --values "$gx#$c/value" --heads 2 --weights "$gx#$c/state" \
  --key-lengths kl.json --grad-output "$gx#$c/dy" --need-weights > gc.json
for pair in query:query keys:key values:value q_proj_weight:q_proj_weight k_proj_weight:k_proj_weight v_proj_weight:v_proj_weight; do
  tensor diff "gc.json#grad/${pair%%:*}" "$gx#$c/grad/${pair##*:}" --rtol 1e-4 --atol 2e-5 -q || fail "cross grad ${pair%%:*} vs PyTorch"
done
# DY as a bundle (a previous output), out_proj nested as it came
tensor pack output="$gx#self_in_proj/dy" > dyb.json
attn-score --self "$gx#self_in_proj/x" --heads 2 --weights "$gx#self_in_proj/state" --grad-output dyb.json > g2.json
tensor diff g.json g2.json -q || fail "DY from a bundle's output"
tensor randn --shape 5,8 --seed 3 > xs.json
attn-score --self xs.json --split-heads --heads 2 --grad-output xs.json > gs.json
tensor show gs.json#grad/self | grep -q 'shape=\[5, 8\]' || fail "split-heads grad of --self"
# bad DY: exit 1 naming the file, the tensor, its shape and the expected one; nothing on stdout
tensor randn --shape 2,5,7 > dy_bad.json
expect_error 1 "output gradient (dy_bad.json): has shape [2, 5, 7], expected output's shape [2, 5, 8]" \
  attn-score --self "$gx#self_in_proj/x" --heads 2 --weights "$gx#self_in_proj/state" --grad-output dy_bad.json
{ printf '{"shape": [5, 8], "data": [1, 2, "NaN"'; for i in $(seq 37); do printf ', 0.5'; done; echo ']}'; } > dy_nan.json
expect_error 1 "output gradient (dy_nan.json): tensor of shape [5, 8] has NaN at [0, 2]" \
  attn-score --self xs.json --heads 2 --weights "$gx#self_in_proj/state" --grad-output dy_nan.json
expect_error 1 "dy_bad.json: the gradient bundle has no member output (has: context)" \
  bash -c 'tensor pack context=dy_bad.json > dyc.json && mv dyc.json dy_bad.json && attn-score --self xs.json --split-heads --heads 2 --grad-output dy_bad.json'
# the score form: the documents' example (dot score, values = keys) against central differences of
# the same loss computed in double precision by hand (python, eps 1e-6), rounded to 6 digits
echo '[[0.5, -1, 2]]' > dc.json
attn-score --query s0.json --keys h.json --score dot --grad-output dc.json > gd.json
echo '[[0.007448, -0.011454, 0.302366]]' > want_q.json
echo '[[-0.043426, -0.196612, 0.251492], [-0.12447, -0.072329, -0.015975], [0.251492, -0.196612, 0.54641], [0.416403, -0.534447, 1.218073]]' > want_k.json
tensor diff gd.json#grad/query want_q.json --atol 2e-6 -q || fail "dot-score grad of the query"
tensor diff gd.json#grad/keys want_k.json --atol 2e-6 -q || fail "dot-score grad of the keys (keys and values roles summed)"
tensor pack context=dc.json > dcb.json
attn-score --query s0.json --keys h.json --score dot --grad-output dcb.json > gd2.json
tensor diff gd.json gd2.json -q || fail "score-form DY from a bundle's context"
tensor randn --shape 3,5 --seed 1 > awq.json && tensor randn --shape 3,5 --seed 2 > awk.json && tensor randn --shape 5 --seed 3 > av.json
tensor pack W_q=awq.json W_k=awk.json v=av.json > aw.json
attn-score --query s0.json --keys h.json --values h.json --score additive --weights aw.json --grad-output dc.json > ga.json
for m in "query:1, 3" "keys:4, 3" "values:4, 3" "W_q:3, 5" "W_k:3, 5" "v:5"; do
  tensor show "ga.json#grad/${m%%:*}" | grep -qF "shape=[${m##*:}]" || fail "additive grad ${m%%:*}: $(tensor show "ga.json#grad/${m%%:*}" 2>&1 | head -1)"
done
expect_error 1 "output gradient (dy_bad.json#context): has shape [2, 5, 7], expected context's shape [1, 3]" \
  attn-score --query s0.json --keys h.json --score dot --grad-output dy_bad.json

# --- one query per batch element: query [N, E] with keys [N, S, E]; T dropped from the results
tensor randn --shape 3,4 --seed 11 > qn.json
tensor randn --shape 3,5,4 --seed 12 > kn.json
attn-score --query qn.json --keys kn.json --score dot > pe.json
for m in "scores:3, 5" "weights:3, 5" "context:3, 4"; do
  tensor show "pe.json#${m%%:*}" | grep -qF "shape=[${m##*:}]" || fail "per-element ${m%%:*}: $(tensor show "pe.json#${m%%:*}" | tail -1)"
done
tensor pack q=qn.json k=kn.json > qk.json
for n in 0 1 2; do  # each row against a run of that batch element alone (references with an index)
  attn-score --query "qk.json#q[$n:$((n + 1))]" --keys "qk.json#k[$n]" --score dot > one.json
  tensor diff one.json#context "pe.json#context[$n:$((n + 1))]" --rtol 1e-6 --atol 1e-7 -q ||
    fail "per-element context row $n differs from a run of element $n alone"
done
echo '[[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]' > mn.json  # a [N, S] mask
attn-score --query qn.json --keys kn.json --mask mn.json > pm.json
tensor get pm.json#weights --index '0,2:' | grep -qx '\[0,0,0\]' || fail "[N, S] mask: $(tensor get pm.json#weights)"
tensor randn --shape 3,4 --seed 13 > dn.json
attn-score --query qn.json --keys kn.json --score dot --grad-output dn.json > pg.json
tensor show pg.json#grad/query | grep -qF 'shape=[3, 4]' || fail "per-element grad/query shape"
tensor randn --shape 3,8 --seed 14 > qn8.json && tensor randn --shape 3,5,8 --seed 15 > kn8.json
attn-score --query qn8.json --keys kn8.json --split-heads --heads 2 --per-head > ph.json
tensor show ph.json#weights | grep -qF 'shape=[3, 2, 5]' || fail "per-element per-head weights: $(tensor show ph.json#weights | tail -1)"
tensor show ph.json#output | grep -qF 'shape=[3, 8]' || fail "per-element multi-head output"
tensor randn --shape 2,4 --seed 16 > q24.json
expect_error 1 "q24.json (query) has shape [2, 4] and kn.json (keys) [3, 5, 4]: a query [N, E] with keys [N, S, E] is one query per batch element, and they disagree on N" \
  attn-score --query q24.json --keys kn.json
# shape errors name the inputs (here the mask's file)
expect_error 1 "attn-score: query qn.json, keys kn.json, mask mbad.json: attention: mask has shape [1, 3], expected" \
  attn-score --query qn.json --keys kn.json --mask mbad.json

# --- the documents' example in batched form, one pipeline: an LSTM encodes [N, T, D]; the last
# layer of h_n is the query, output the keys, for every batch element (docs/attn-score.md)
tensor randn --shape 2,5,3 --seed 21 > xe.json
for layers in 1 2; do
  lstm-run --init --input-size 3 --hidden-size 4 --layers $layers --seed 22 --save-weights enc$layers.json
  lstm-run xe.json --weights enc$layers.json | attn-score --query '-#h_n[-1]' --keys -#output --score dot > pipe$layers.json ||
    fail "$layers-layer pipeline"
  lstm-run xe.json --weights enc$layers.json > run$layers.json
  for n in 0 1; do  # batch element n alone, through files
    tensor get run$layers.json#h_n --index "-1,$n:$((n + 1))" > q_$n.json
    tensor get run$layers.json#output --index "$n" > k_$n.json
    attn-score --query q_$n.json --keys k_$n.json --score dot | tensor get -#context > c_$n.json
    tensor get pipe$layers.json#context --index "$n:$((n + 1))" | tensor diff - c_$n.json --rtol 1e-6 --atol 1e-7 -q ||
      fail "$layers-layer pipeline: element $n differs from its own run"
  done
done
# bidirectional: keys of 2H, the query of H: refused with the fix; the fixes run
lstm-run --init --input-size 3 --hidden-size 4 --bidirectional --seed 23 --save-weights encbi.json
expect_error 1 "<stdin>#h_n[-1] (query) has shape [2, 4] and <stdin>#output (keys) [2, 5, 8]: they disagree on the feature size (4 and 8; the dot score needs them equal): score with --score general --weights W.json (a bundle with W [4, 8]) or --score additive; keys of 2 x 4 are a bidirectional encoder's output (both directions), and h_n[-1] is its last layer's backward state: pair h_n[-2] with output[:,:,:4] (forward), or h_n[-1] with output[:,:,4:] (backward)" \
  bash -c "lstm-run xe.json --weights encbi.json | attn-score --query '-#h_n[-1]' --keys -#output --score dot"
lstm-run xe.json --weights encbi.json | attn-score --query '-#h_n[-2]' --keys '-#output[:,:,:4]' --score dot > bif.json || fail "bidirectional, forward halves"
tensor show bif.json#context | grep -qF 'shape=[2, 4]' || fail "bidirectional forward context shape"
tensor pack W=<(tensor randn --shape 4,8 --seed 24) > wg48.json
lstm-run xe.json --weights encbi.json | attn-score --query '-#h_n[-1]' --keys -#output --score general --weights wg48.json > big.json ||
  fail "bidirectional, general score"
tensor show big.json#context | grep -qF 'shape=[2, 8]' || fail "bidirectional general context shape"

# --heatmap is written only when the run succeeded, standard output included
expect_error 1 "standard output: write error" bash -c 'attn-score --query s0.json --keys h.json --heatmap full.svg > /dev/full'
[[ ! -e full.svg ]] || fail "--heatmap written although standard output failed"
# scores and weights past the bound: the advice names an option that exists in the score form
awk 'BEGIN { printf "{\"shape\": [32769, 1], \"data\": [0"; for (i = 1; i < 32769; i++) printf ",0"; print "]}" }' > qbig.json
awk 'BEGIN { printf "{\"shape\": [32768, 1], \"data\": [0"; for (i = 1; i < 32768; i++) printf ",0"; print "]}" }' > kbig.json
expect_error 1 "the score form prints scores and weights of [N, T, S] = [1, 32769, 32768] (4.0 GiB each); for the context alone, run the same attention as --split-heads --heads 1" \
  attn-score --query qbig.json --keys kbig.json
grep -q "ask for the context only" err.txt && fail "advice for an option the score form lacks"
expect_error 1 "give fewer queries per run" attn-score --query qbig.json --keys kbig.json --score dot

grep -q "1 = attend" <<<"$(attn-score --help)" || fail "--help states the mask polarity"  # (not a pipe: grep -q would end it early, SIGPIPE)
attn-score --version | grep -q attnkit || fail "--version"

finish attn-score

#!/usr/bin/env bash
# lstm-run end to end: PyTorch golden fixtures through the CLI, [T, D] vs [N, T, D], --init /
# --save-weights round trips, layouts, --trace, pipes, and the error contract (exit 1 bad input,
# 2 usage; message on stderr naming the tensor, its shape and the expected one; nothing on stdout).
set -euo pipefail
fx="$ATTNKIT_SOURCE/tests/fixtures/recurrent"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

# --- golden values from PyTorch, through the CLI (references into the fixture bundles)
for f in "$fx"/torch_*.json; do
  name="$(basename "$f" .json)"
  case "$name" in
    torch_rnn_relu_*) cell=rnn-relu ;;
    torch_rnn_*) cell=rnn ;;
    torch_gru_*) cell=gru ;;
    *) cell=lstm ;;
  esac
  args=("$f#x" --weights "$f#weights" --cell "$cell" --threads 2)
  grep -q '"h0":' "$f" && args+=(--h0 "$f#h0")
  grep -q '"c0":' "$f" && args+=(--c0 "$f#c0")
  grep -q '"lengths":' "$f" && args+=(--lengths "$f#lengths")
  lstm-run "${args[@]}" > out.json || { fail "$name: lstm-run exited $?"; continue; }
  tensor diff out.json "$f#expected" --rtol 1e-5 --atol 1e-5 --quiet || fail "$name: output differs from PyTorch"
done

# --- the documents' step in the cs231n layout (float64 numpy values)
step="$fx/cs231n_lstm_step.json"
tensor reshape "$step#x" --shape 3,1,4 > x1.json
tensor reshape "$step#prev_h" --shape 1,3,5 > h0.json
tensor reshape "$step#prev_c" --shape 1,3,5 > c0.json
lstm-run x1.json --weights "$step#weights" --layout cs231n --h0 h0.json --c0 c0.json --trace > step.json
tensor reshape step.json#h_n --shape 3,5 | tensor diff - "$step#expected/next_h" --rtol 1e-5 --atol 1e-6 --quiet || fail "cs231n next_h"
tensor reshape step.json#c_n --shape 3,5 | tensor diff - "$step#expected/next_c" --rtol 1e-5 --atol 1e-6 --quiet || fail "cs231n next_c"
tensor reshape step.json#trace/a --shape 3,20 | tensor diff - "$step#expected/a" --rtol 1e-5 --atol 1e-5 --quiet || fail "cs231n trace a"
tensor reshape step.json#trace/o --shape 3,5 | tensor diff - "$step#expected/o" --rtol 1e-5 --atol 1e-6 --quiet || fail "cs231n trace o"
seq="$fx/cs231n_lstm_sequence.json"
lstm-run "$seq#x" --weights "$seq#weights" --layout cs231n --h0 "$seq#h0" | tensor diff - "$seq#expected" --rtol 1e-5 --atol 1e-6 --quiet || fail "cs231n sequence"

# --- [T, D] drops N everywhere; same numbers as [1, T, D]
lstm-run --init --input-size 3 --hidden-size 4 --layers 2 --bidirectional --seed 7 --save-weights w.json
[[ -s w.json ]] || fail "--save-weights wrote nothing"
tensor randn --shape 5,3 --seed 1 > xt.json
tensor reshape xt.json --shape 1,5,3 > xnt.json
lstm-run xt.json --weights w.json --trace > t.json
lstm-run xnt.json --weights w.json --trace > nt.json
tensor show t.json#output | grep -q 'shape=\[5, 8\]' || fail "[T, D] output shape: $(tensor show t.json#output | tail -1)"
tensor show t.json#h_n | grep -q 'shape=\[4, 4\]' || fail "[T, D] h_n shape"
tensor show t.json#trace_reverse/a | grep -q 'shape=\[5, 16\]' || fail "[T, D] trace_reverse/a shape"
tensor reshape nt.json#output --shape 5,8 | tensor diff - t.json#output --rtol 0 --atol 0 --quiet || fail "[T, D] != [1, T, D]"
tensor reshape nt.json#c_n --shape 4,4 | tensor diff - t.json#c_n --rtol 0 --atol 0 --quiet || fail "[T, D] c_n"

# --- --init is deterministic; --save-weights round-trips in both layouts; conversion torch -> cs231n
lstm-run --init --input-size 3 --hidden-size 4 --layers 2 --bidirectional --seed 7 xnt.json --save-weights w2.json > i.json
cmp -s w.json w2.json || fail "--init --seed 7 twice gave different weights"
tensor diff i.json#output nt.json#output --rtol 0 --atol 0 --quiet || fail "--init run differs from --weights run"
lstm-run --weights w.json --save-weights cs.json --save-layout cs231n
grep -q '"Wx_l1_reverse"' cs.json || fail "cs231n names: $(head -c 200 cs.json)"
status=0; lstm-run xnt.json --weights cs.json --layout cs231n | tensor diff - nt.json#output --rtol 1e-6 --atol 1e-6 --quiet 2>/dev/null || status=$?
[[ $status == 1 ]] || fail "a bundle diff against one tensor should differ (exit 1), exited $status"
lstm-run xnt.json --weights cs.json --layout cs231n > cs_out.json
tensor diff cs_out.json#output nt.json#output --rtol 1e-6 --atol 1e-6 --quiet || fail "cs231n layout run differs"
for cell in gru rnn rnn-relu; do
  lstm-run --init --cell $cell --input-size 2 --hidden-size 3 --seed 1 --save-weights w_$cell.json
  tensor randn --shape 2,4,2 --seed 3 | lstm-run - --weights w_$cell.json --cell $cell > o_$cell.json
  lacks '"c_n"' "$cell has no c_n" cat o_$cell.json
  tensor show o_$cell.json#h_n | grep -q 'shape=\[1, 2, 3\]' || fail "$cell h_n shape"
done

# --- pipes: stdin read once, referenced twice; NDJSON records run one by one
tensor pack x=xnt.json h0=t.json#h_n > in.json
tensor reshape in.json#h0 --shape 4,1,4 > h0b.json
tensor pack x=xnt.json h0=h0b.json | lstm-run -#x --weights w.json --h0 -#h0 > piped.json
lstm-run xnt.json --weights w.json --h0 h0b.json | tensor diff - piped.json --rtol 0 --atol 0 --quiet || fail "stdin twice"
{ tensor get xnt.json; tensor get xnt.json; } | lstm-run - --weights w.json > nd.json
[[ "$(wc -l < nd.json)" == 2 ]] || fail "NDJSON: expected 2 lines, got $(wc -l < nd.json)"
if command -v attn-score >/dev/null; then
  tensor randn --shape 1,2,8 --seed 4 > q.json
  lstm-run xnt.json --weights w.json | attn-score --query q.json --keys -#output --values -#output > att.json \
    || fail "lstm-run | attn-score --keys -#output"
fi

# --- bad input: exit 1, the message names the tensor, its shape and the expected one
lstm-run --init --input-size 3 --hidden-size 4 --seed 1 --save-weights w1.json
tensor randn --shape 8,3 > bad_ih.json
tensor pack weight_ih_l0=bad_ih.json weight_hh_l0=w1.json#weight_hh_l0 bias_ih_l0=w1.json#bias_ih_l0 bias_hh_l0=w1.json#bias_hh_l0 > bad_w.json
expect_error 1 "lstm-run: bad_w.json: weight_ih_l0 has shape [8, 3], expected [16, 3] (4*H, D) for hidden size 4" lstm-run xnt.json --weights bad_w.json
tensor pack weight_ih_l0=w1.json#weight_ih_l0 bias_ih_l0=w1.json#bias_ih_l0 > miss.json
expect_error 1 "missing weight weight_hh_l0" lstm-run xnt.json --weights miss.json
tensor pack weight_ih_l0=w1.json#weight_ih_l0 weight_hh_l0=w1.json#weight_hh_l0 bias_ih_l0=w1.json#bias_ih_l0 > miss2.json
expect_error 1 "missing weight bias_hh_l0 (expected shape [16] (4*H))" lstm-run xnt.json --weights miss2.json
expect_error 1 "weight_hh_l0 has shape [16, 4], expected [12, 4] (3*H, H) for hidden size 4: a gru has 3 gates (its 16 rows fit --cell lstm)" lstm-run xnt.json --weights w1.json --cell gru
tensor randn --shape 2,5,6 > x6.json
expect_error 1 "lstm-run: x6.json: input has shape [2, 5, 6], expected [N, T, 3] (the weights' input size D is 3)" lstm-run x6.json --weights w1.json
tensor randn --shape 5 > x1d.json
expect_error 1 "lstm-run: x1d.json: input has shape [5], expected [N, T, 3] or [T, 3]" lstm-run x1d.json --weights w1.json
tensor randn --shape 1,2,5 > h05.json
tensor randn --shape 2,5,3 > x3.json
expect_error 1 "lstm-run: h05.json: h0 has shape [1, 2, 5], expected [1, 2, 4] (layers*dirs, N, H)" lstm-run x3.json --weights w1.json --h0 h05.json
tensor randn --shape 2,4 > h0t.json
expect_error 1 "lstm-run: h0t.json: h0 has shape [2, 4], expected [1, 4] (layers*dirs, H)" lstm-run xt.json --weights w1.json --h0 h0t.json
expect_error 1 "lstm-run: h05.json: c0 has shape [1, 2, 5], expected [1, 2, 4]" lstm-run x3.json --weights w1.json --c0 h05.json
tensor randn --shape 2,5,2 > x2.json
expect_error 1 "lstm-run: h05.json: c0 is given, but a gru has no cell state" lstm-run x2.json --weights w_gru.json --cell gru --c0 h05.json
echo '[5, 6]' > len_big.json
expect_error 1 "lstm-run: len_big.json: lengths[1] is 6, expected 0 <= length <= 5" lstm-run x3.json --weights w1.json --lengths len_big.json
echo '[5, -1]' > len_neg.json
expect_error 1 "lengths[1] is -1, expected 0 <= length <= 5" lstm-run x3.json --weights w1.json --lengths len_neg.json
echo '[5, 2.5]' > len_frac.json
expect_error 1 "lengths[1] is 2.5, expected a whole number" lstm-run x3.json --weights w1.json --lengths len_frac.json
echo '[5, 2, 1]' > len_n.json
expect_error 1 "lstm-run: len_n.json: lengths has shape [3], expected [2] (one length per sequence)" lstm-run x3.json --weights w1.json --lengths len_n.json
expect_error 1 "weights: unexpected member \"Wx\"" lstm-run x3.json --weights cs.json
expect_error 1 "weights: unexpected member \"weight_ih_l0\"" lstm-run x3.json --weights w1.json --layout cs231n
expect_error 1 "weights: expected a bundle" lstm-run x3.json --weights x3.json
expect_error 1 "no-such.json" lstm-run x3.json --weights no-such.json
echo '[[[1, "NaN", 3]]]' > xnan.json
expect_error 1 "NaN" lstm-run xnan.json --weights w1.json
echo '[1, "NaN", 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]' > nan16.json
tensor pack weight_ih_l0=w1.json#weight_ih_l0 weight_hh_l0=w1.json#weight_hh_l0 bias_ih_l0=w1.json#bias_ih_l0 bias_hh_l0=nan16.json > wnan.json
expect_error 1 "wnan.json#bias_hh_l0: tensor of shape [16] has NaN at [1] (pass --allow-nan to accept it)" lstm-run x3.json --weights wnan.json
lstm-run x3.json --weights wnan.json --allow-nan > /dev/null || fail "--allow-nan should accept NaN weights"

# --- usage errors: exit 2
expect_error 2 "give --weights REF, or --init" lstm-run x3.json
expect_error 2 "--init needs --input-size D and --hidden-size H" lstm-run x3.json --init --hidden-size 4
expect_error 2 "the cs231n layout covers rnn, rnn-relu and lstm" lstm-run x3.json --weights w_gru.json --cell gru --layout cs231n
expect_error 2 "--cell" lstm-run x3.json --weights w1.json --cell transformer
expect_error 2 "excludes" lstm-run x3.json --weights w1.json --init --input-size 3 --hidden-size 4
expect_error 2 "go with --init" lstm-run x3.json --weights w1.json --layers 2

# --- --grad-output: PyTorch autograd golden gradients through the CLI (tests/fixtures/gen_recurrent_grad.py)
gx="$ATTNKIT_SOURCE/tests/fixtures/recurrent_grad"
for f in "$gx"/*.json; do
  name="$(basename "$f" .json)"
  case "$name" in
    rnn_relu_*) cell=rnn-relu ;;
    rnn_*) cell=rnn ;;
    gru_*) cell=gru ;;
    *) cell=lstm ;;
  esac
  args=("$f#x" --weights "$f#weights" --cell "$cell" --grad-output "$f#dy")
  grep -q '"h0":' "$f" && args+=(--h0 "$f#h0")
  grep -q '"c0":' "$f" && args+=(--c0 "$f#c0")
  grep -q '"lengths":' "$f" && args+=(--lengths "$f#lengths")
  lstm-run "${args[@]}" > g.json || { fail "grad $name: lstm-run exited $?"; continue; }
  tensor diff g.json#output "$f#expected/output" --rtol 1e-5 --atol 1e-5 --quiet || fail "grad $name: output differs"
  tensor diff g.json#grad "$f#grad" --rtol 1e-4 --atol 1e-5 --quiet || fail "grad $name: gradients differ from PyTorch"
done
# only output's gradient, as a bare tensor; h_n's alone; trace and grad together
f="$gx/lstm_1layer.json"
lstm-run "$f#x" --weights "$f#weights" --grad-output "$f#dy/output" --trace > g1.json || fail "grad: a bare tensor DY"
tensor show g1.json#trace/i > /dev/null || fail "grad with --trace lost the trace"
tensor show g1.json#grad/weight_hh_l0 | grep -q 'shape=\[20, 5\]' || fail "grad/weight_hh_l0 shape"
echo "{\"output\": $(tensor get "$f#dy/output")}" > dy_out.json
# (a negative check that can fail: diff must say "differ" (exit 1), not crash or refuse (2))
status=0; lstm-run "$f#x" --weights "$f#weights" --grad-output dy_out.json | tensor diff - g1.json#grad --rtol 0 --atol 0 --quiet 2>/dev/null || status=$?
[[ $status == 1 ]] || fail "a whole result bundle against grad alone: diff exited $status, expected 1 (they differ)"
lstm-run "$f#x" --weights "$f#weights" --grad-output dy_out.json > g2.json
tensor diff g2.json#grad g1.json#grad --rtol 0 --atol 0 --quiet || fail "grad: {output: DY} != DY"
# [T, D] works like [1, T, D]
lstm-run --init --input-size 3 --hidden-size 4 --layers 2 --bidirectional --seed 7 --save-weights wg.json
tensor randn --shape 5,8 --seed 3 > dyt.json
tensor reshape dyt.json --shape 1,5,8 > dynt.json
lstm-run xt.json --weights wg.json --grad-output dyt.json > gt.json
lstm-run xnt.json --weights wg.json --grad-output dynt.json > gnt.json
tensor show gt.json#grad/input | grep -q 'shape=\[5, 3\]' || fail "[T, D] grad/input shape"
tensor reshape gnt.json#grad/input --shape 5,3 | tensor diff - gt.json#grad/input --rtol 0 --atol 0 --quiet || fail "[T, D] grad/input"
tensor diff gnt.json#grad/weight_ih_l1_reverse gt.json#grad/weight_ih_l1_reverse --rtol 0 --atol 0 --quiet || fail "[T, D] grad weights"
# cs231n weights: gradients named Wx, Wh, b (cs231n layout and gate order)
lstm-run --weights wg.json --save-weights csg.json --save-layout cs231n
lstm-run xt.json --weights csg.json --layout cs231n --grad-output dyt.json > gcs.json
tensor show gcs.json#grad/Wx_l1_reverse | grep -q 'shape=\[8, 16\]' || fail "cs231n grad Wx_l1_reverse shape"
tensor show gcs.json#grad/b | grep -q 'shape=\[16\]' || fail "cs231n grad b shape"
expect_error 1 'gcs.json#grad: no tensor named "weight_ih_l0"' tensor show gcs.json#grad/weight_ih_l0  # cs231n grads carry no torch names
tensor diff gcs.json#grad/input gt.json#grad/input --rtol 1e-5 --atol 1e-6 --quiet || fail "cs231n grad/input != torch grad/input"
# bad upstream gradients: exit 1, the file, the tensor, its shape and the expected one; nothing on stdout
tensor randn --shape 5,4 --seed 3 > dy_bad.json
expect_error 1 "dy_bad.json: the gradient of output has shape [5, 4], expected [5, 8] (the shape of output)" \
  lstm-run xt.json --weights wg.json --grad-output dy_bad.json
echo '{"h_n": [[1, 2]]}' > dy_hn_bad.json
expect_error 1 "dy_hn_bad.json: the gradient of h_n has shape [1, 2], expected [4, 4] (the shape of h_n)" \
  lstm-run xt.json --weights wg.json --grad-output dy_hn_bad.json
echo '[[1, "NaN", 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0, 0]]' > dy_nan.json
# an upstream gradient with NaN is refused even with --allow-nan (it would make every gradient NaN)
expect_error 1 "dy_nan.json: the gradient of output (shape [5, 8]) has NaN at [0, 1]" \
  lstm-run xt.json --weights wg.json --grad-output dy_nan.json --allow-nan
expect_error 1 "dy_nan.json: the gradient of output (shape [5, 8]) has NaN at [0, 1]" \
  lstm-run xt.json --weights wg.json --grad-output dy_nan.json
echo '{"output": [[0]], "h": [[0]]}' > dy_member.json
expect_error 1 "dy_member.json: unexpected member \"h\" (upstream gradients are output, h_n, c_n)" \
  lstm-run xt.json --weights wg.json --grad-output dy_member.json
lstm-run --init --cell gru --input-size 3 --hidden-size 4 --seed 1 --save-weights wgru.json
echo '{"c_n": [[0, 0, 0, 0]]}' > dy_cn.json
expect_error 1 "dy_cn.json: c_n is given, but a gru has no c_n" lstm-run xt.json --weights wgru.json --cell gru --grad-output dy_cn.json
expect_error 2 "--grad-output needs an INPUT" lstm-run --weights wg.json --save-weights w3.json --grad-output dyt.json

# --- --time-major: [T, N, D] in and out (PyTorch's batch_first=False), the same numbers as batch-first
lstm-run --init --input-size 3 --hidden-size 4 --layers 2 --bidirectional --seed 7 --save-weights wtm.json
tensor randn --shape 2,5,3 --seed 8 > xb.json
tensor transpose xb.json --axes 1,0,2 > xtm.json
echo '[5, 3]' > len53.json
tensor randn --shape 2,5,8 --seed 9 > dyb.json
tensor transpose dyb.json --axes 1,0,2 > dytm.json
lstm-run xb.json --weights wtm.json --lengths len53.json --trace --grad-output dyb.json > bf.json
lstm-run xtm.json --weights wtm.json --lengths len53.json --trace --grad-output dytm.json --time-major > tm.json
tensor show tm.json#output | grep -q 'shape=\[5, 2, 8\]' || fail "--time-major output shape: $(tensor show tm.json#output | tail -1)"
for m in output trace/h trace_reverse/i grad/input; do
  tensor transpose "tm.json#$m" --axes 1,0,2 | tensor diff - "bf.json#$m" --rtol 0 --atol 0 -q || fail "--time-major $m differs from batch-first"
done
for m in h_n c_n grad/weight_hh_l1_reverse; do
  tensor diff "tm.json#$m" "bf.json#$m" --rtol 0 --atol 0 -q || fail "--time-major $m differs from batch-first"
done
# refused where it would do nothing: a [T, D] input has no batch axis; --save-weights alone runs nothing
expect_error 1 "lstm-run: xt.json: input has shape [5, 3]: --time-major reads [T, N, D], and a [T, D] input has no batch axis to move (drop --time-major)" \
  lstm-run xt.json --weights wtm.json --time-major
expect_error 2 "--time-major needs an INPUT to run" lstm-run --weights wtm.json --save-weights wtm2.json --time-major
[[ ! -e wtm2.json ]] || fail "a refused --time-major run wrote --save-weights"
tensor randn --shape 5,2,6 > xtm6.json
expect_error 1 "lstm-run: xtm6.json: input has shape [5, 2, 6], expected [T, N, 3]" lstm-run xtm6.json --weights wtm.json --time-major
expect_error 1 "dytm.json: the gradient of output has shape [5, 2, 8], expected [2, 5, 8]" \
  lstm-run xb.json --weights wtm.json --grad-output dytm.json

# --- help and version
lstm-run --help > help.txt || fail "--help exited $?"
grep -q "lstm-run --init --input-size 3" help.txt || fail "--help lacks the example"
lstm-run --version | grep -q attnkit || fail "--version"

finish lstm-run

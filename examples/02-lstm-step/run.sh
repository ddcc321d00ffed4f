#!/usr/bin/env bash
# shows: the LSTM step gate by gate: a = x Wx + h Wh + b split into i, f, o, g; c and h (checked against numpy)
# The documents' LSTM step, gate by gate: a = Wx·x + Wh·h + b split into i, f, o, g;
# c = f ⊙ c_prev + i ⊙ g; h = o ⊙ tanh(c). The numbers are CS231n assignment 3's
# (N=3 sequences, D=4 inputs, H=5 hidden units, everything from linspace), in the documents'
# layout (Wx [D, 4H], Wh [H, 4H], b [4H], gates i, f, o, g), checked against float64 numpy.
# With --check, compares what it prints against expected.txt (a ctest case).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../lib/common.sh"
cp "$here/numpy_step.json" "$work/"
walk() {
  cd "$work"
  run "tensor linspace -0.4 1.2 --shape 3,1,4 > x.json     # x_t    [N, T=1, D]"
  run "tensor linspace -0.3 0.7 --shape 1,3,5 > h0.json    # h_t-1  [layers, N, H]"
  run "tensor linspace -0.4 0.9 --shape 1,3,5 > c0.json    # c_t-1  [layers, N, H]"
  run "tensor linspace -2.1 1.3 --shape 4,20 > Wx.json     # Wx     [D, 4H]"
  run "tensor linspace -0.7 2.2 --shape 5,20 > Wh.json     # Wh     [H, 4H]"
  run "tensor linspace 0.3 0.7 --shape 20 > b.json         # b      [4H]"
  run "tensor pack Wx=Wx.json Wh=Wh.json b=b.json > weights.json"
  run "lstm-run x.json --weights weights.json --layout cs231n --h0 h0.json --c0 c0.json --trace > step.json"
  # a = x Wx + h Wh + b, [N, T, 4H]: columns 0-4 i, 5-9 f, 10-14 o, 15-19 g
  run "tensor reshape step.json#trace/a --shape 3,20 | tensor show -"
  run "tensor reshape step.json#trace/i --shape 3,5 | tensor show -    # i = sigmoid(a_i)"
  run "tensor reshape step.json#trace/f --shape 3,5 | tensor show -    # f = sigmoid(a_f)"
  run "tensor reshape step.json#trace/o --shape 3,5 | tensor show -    # o = sigmoid(a_o)"
  run "tensor reshape step.json#trace/g --shape 3,5 | tensor show -    # g = tanh(a_g)"
  run "tensor reshape step.json#c_n --shape 3,5 | tensor show -        # c = f * c_prev + i * g"
  run "tensor reshape step.json#h_n --shape 3,5 | tensor show -        # h = o * tanh(c)"
  run "tensor reshape step.json#h_n --shape 3,5 | tensor diff - numpy_step.json#next_h --rtol 1e-5 --atol 1e-6 --quiet && echo 'next_h matches numpy'"
  run "tensor reshape step.json#c_n --shape 3,5 | tensor diff - numpy_step.json#next_c --rtol 1e-5 --atol 1e-6 --quiet && echo 'next_c matches numpy'"
}
# With --check, the numbers within 1e-5 (relative) of expected.txt: the last printed digits of float32
# results move with the summation order of the GEMM kernel (AVX2 vs AVX-512, threads).
walk_or_check "$@"

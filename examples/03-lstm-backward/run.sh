#!/usr/bin/env bash
# shows: the same step's backward pass: gradients of the input, h0, c0 and every weight (checked by central differences)
# The documents' LSTM step (example 02: CS231n assignment 3's numbers, cs231n layout Wx [D, 4H],
# Wh [H, 4H], b [4H], gates i, f, o, g), then its backward pass: given upstream gradients of the
# step's outputs (dnext_h for h_n, dnext_c for c_n), lstm-run --grad-output gives the gradients
# of the input, h0, c0 and every weight, named and laid out as the weights (dWx, dWh, db). An
# entry of dWh and one of dWx are checked against central finite differences computed in the
# shell (central_difference.sh: lstm-run forward twice, awk, no numpy). With --check, compares what it prints against expected.txt.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../lib/common.sh"
cp "$here/central_difference.sh" "$here/rounded.sh" "$work/"
walk() {
  cd "$work"
  run "tensor linspace -0.4 1.2 --shape 3,1,4 > x.json     # x_t    [N, T=1, D]"
  run "tensor linspace -0.3 0.7 --shape 1,3,5 > h0.json    # h_t-1  [layers, N, H]"
  run "tensor linspace -0.4 0.9 --shape 1,3,5 > c0.json    # c_t-1  [layers, N, H]"
  run "tensor linspace -2.1 1.3 --shape 4,20 > Wx.json     # Wx     [D, 4H]"
  run "tensor linspace -0.7 2.2 --shape 5,20 > Wh.json     # Wh     [H, 4H]"
  run "tensor linspace 0.3 0.7 --shape 20 > b.json         # b      [4H]"
  run "tensor pack Wx=Wx.json Wh=Wh.json b=b.json > weights.json"
  # upstream gradients: loss = sum(dnext_h * next_h) + sum(dnext_c * next_c)
  run "tensor linspace -1 1 --shape 1,3,5 > dh.json        # dnext_h [layers, N, H]"
  run "tensor linspace 0.5 -0.5 --shape 1,3,5 > dc.json    # dnext_c [layers, N, H]"
  run "tensor pack h_n=dh.json c_n=dc.json > dy.json"
  run "lstm-run x.json --weights weights.json --layout cs231n --h0 h0.json --c0 c0.json --grad-output dy.json > grad.json"
  # grad holds input, h0, c0 and the weights by their names: Wx, Wh, b (cs231n layout)
  run "./rounded.sh grad.json#grad/b      # db [4H]: columns 0-4 i, 5-9 f, 10-14 o, 15-19 g"
  run "./rounded.sh grad.json#grad/h0     # dprev_h [layers, N, H]"
  run "./rounded.sh grad.json#grad/c0     # dprev_c = (dnext_c + dnext_h * o * (1 - tanh(c)^2)) * f"
  run "./central_difference.sh Wh 4 4 1e-2     # dWh[4, 4]: column 4 = the i gate of unit 4"
  run "./central_difference.sh Wx 3 12 1e-2    # dWx[3, 12]: column 12 = the o gate of unit 2"
}
walk_or_check "$@"

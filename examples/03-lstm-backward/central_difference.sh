#!/usr/bin/env bash
# central_difference.sh NAME ROW COL EPS: checks one entry of lstm-run's weight gradient against a
# central finite difference, in the shell (awk, no numpy). In the current folder it reads x.json,
# h0.json, c0.json, the cs231n weights Wx.json, Wh.json, b.json, the upstream gradients dh.json
# (of h_n) and dc.json (of c_n), and grad.json (lstm-run --grad-output's result).
#   loss(W) = sum(dh * h_n) + sum(dc * c_n)
#   d loss / d W[ROW, COL] ~ (loss(W + EPS e) - loss(W - EPS e)) / (2 EPS)
set -euo pipefail
name="$1" row="$2" col="$3" eps="$4"
data() { tensor get "$1" --format flat | sed 's/.*"data":\[\([^]]*\)\].*/\1/' | tr ',' '\n'; }
cols="$(tensor get "$name.json" --format flat | sed 's/.*"shape":\[[0-9]*,\([0-9]*\)\].*/\1/')"
k=$((row * cols + col))  # row-major index
# W with entry k moved by `delta`, as a flat tensor
nudged() {
  tensor get "$name.json" --format flat | awk -v k="$k" -v d="$1" '{
    match($0, /"data":\[[^]]*\]/); head = substr($0, 1, RSTART + 7); tail = substr($0, RSTART + RLENGTH - 1)
    n = split(substr($0, RSTART + 8, RLENGTH - 9), v, ",")
    v[k + 1] = sprintf("%.9g", v[k + 1] + d)
    s = v[1]; for (i = 2; i <= n; i++) s = s "," v[i]
    print head s tail }'
}
loss() {
  nudged "$1" > nudged.json
  local args=(Wx=Wx.json Wh=Wh.json b=b.json)
  args=("${args[@]/#$name=$name.json/$name=nudged.json}")
  tensor pack "${args[@]}" > w_nudged.json
  lstm-run x.json --weights w_nudged.json --layout cs231n --h0 h0.json --c0 c0.json > run_nudged.json
  paste <(data run_nudged.json#h_n) <(data dh.json) <(data run_nudged.json#c_n) <(data dc.json) |
    awk '{ s += $1 * $2 + $3 * $4 } END { printf "%.10g\n", s }'
}
plus="$(loss "$eps")" minus="$(loss "-$eps")"
backward="$(data "grad.json#grad/$name" | sed -n "$((k + 1))p")"
awk -v p="$plus" -v m="$minus" -v e="$eps" -v b="$backward" -v what="$name[$row, $col]" 'BEGIN {
  fd = (p - m) / (2 * e); d = fd - b; if (d < 0) d = -d
  printf "d loss / d %s: backward %.4f, central difference %.4f (eps %s)\n", what, b, fd, e
  if (d <= 1e-4 + 1e-2 * (b < 0 ? -b : b)) print "they agree (within 1e-4 + 1%)"; else { print "they DIFFER by " d; exit 1 } }'

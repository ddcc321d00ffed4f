#!/usr/bin/env bash
# shows: CNN vs RNN vs self-attention: the analytic table, the gradient against distance, a long-range recall task
# The documents' closing comparison, CNN vs RNN vs self-attention, as numbers (docs/compare-arch.md):
# the analytic table of "Attention Is All You Need" for n = d = 512; the gradient of the last output
# against distance at initialisation (the plain RNN's vanishes, attention's does not); and a tiny
# recall task that the RNN cannot learn at distance 31 and one attention layer can. The timings
# (--measure) change from run to run, so they are left to the manual; what is printed here is fixed
# by the seed (qualitative words where float rounding could differ across processors).
# With --check, compares what it prints against expected.txt (a ctest case).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../lib/common.sh"
walk() {
  cd "$work"
  echo "# the analytic table for n = d = 512, k = 3, r = 64 (the first line, machine and load, left out)"
  run "compare-arch --n 512 --d 512 --k 3 --r 64 --format table | sed 1,2d"
  echo
  echo "# ||d y_63 / d x_s|| against the distance 63 - s, at initialisation, through autograd (n = 64, d = 16)"
  run "compare-arch --gradient-path --n 64 --path-d 16 --threads 1 --seed 1 --plot grad.svg > grad.json"
  python3 - <<'PY'
import json
g = json.load(open("grad.json"))["gradient_path"]
for c in g["curves"]:
    v = c["norm"]
    far = sorted(v[32:])[len(v[32:]) // 2]   # median over distances 32..63
    near = sorted(v[1:32])[len(v[1:32]) // 2]  # and over 1..31
    print(f"{c['layer']:16s} distance 63 / distance 0: {'below 1e-6' if v[63] < 1e-6 * v[0] else 'above 1e-6'};"
          f"  median far / median near: {'above 0.1' if far > 0.1 * near else 'below 0.1'}")
PY
  echo
  echo "# recall the first token at the last position: the same 150 steps for each, n = 4 and n = 32"
  run "compare-arch --learn --learn-n 4,32 --learn-steps 150 --learn-d 16 --lr 0.01 --layers rnn,attention-tiled --threads 1 > learn.json"
  python3 - <<'PY'
import json
l = json.load(open("learn.json"))["learned"]
for r in l["runs"]:
    a = r["accuracy"]
    word = "learned (>= 0.9)" if a >= 0.9 else "chance (<= 0.3)" if a <= 0.3 else "partly"
    print(f"{r['layer']:16s} n={r['n']:<3d} {word}, {r['steps']} steps")
print(f"chance is 1/{l['keys']}")
PY
  keep grad.svg
}
walk_or_check "$@"

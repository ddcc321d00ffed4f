#!/usr/bin/env bash
# compare-arch end to end at tiny sizes: the analytic table's numbers, a measurement's fields, the
# gradient path's shape, a learning run, the plot, and the error contract: bad values exit 2 (usage)
# or 1 (a size the machine cannot hold) before any work, with nothing on stdout.
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, lacks, finish

# --- the analytic table, evaluated by hand for n=8 d=4 k=2 r=4 (tests/unit/test_compare_arch.cpp)
compare-arch --n 8 --d 4 --k 2 --r 4 > a.json || fail "analytic run exited $?"
python3 - <<'PY' || fail "analytic values: $(cat a.json)"
import json
a = json.load(open("a.json"))
rows = {r["layer"]: r for r in a["analytic"]}
assert [r["layer"] for r in a["analytic"]] == ["self-attention", "recurrent", "convolutional", "restricted self-attention"]
want = {"self-attention": (2048, 1, 1, 1152), "recurrent": (512, 8, 8, 256),
        "convolutional": (512, 1, 3, 384), "restricted self-attention": (1472, 1, 4, 768)}
for name, (flops, steps, path, mem) in want.items():
    r = rows[name]
    assert (r["flops"], r["sequential_steps"], r["path_length"], r["activation_bytes"]) == (flops, steps, path, mem), r
assert "measured" not in a and "gradient_path" not in a and "learned" not in a
PY
compare-arch --n 8 --d 4 --k 2 --r 4 --format table > a.txt || fail "table exited $?"
grep -qE '^recurrent +O\(n d\^2\) +O\(n\) +O\(n\) +2nd ' a.txt || fail "table row: $(cat a.txt)"
# the caption says which columns are Table 1's and which are evaluated; huge sizes stay readable:
# bytes in the largest unit up to EiB, GFLOP without an exponent
grep -qF 'complexity, sequential, path from Attention Is All You Need, Table 1' a.txt || fail "table caption: $(head -n 3 a.txt)"
grep -qF 'evaluated for these sizes' a.txt || fail "table caption: $(head -n 3 a.txt)"
compare-arch --n 1000000000000 --d 8 --format table > big.txt || fail "n = 10^12 table exited $?"
grep -qE '^self-attention .* [0-9]{17} +1 +1 +[0-9]+\.[0-9]{2} EiB$' big.txt || fail "n = 10^12 self-attention row: $(cat big.txt)"
grep -qE '[0-9]e[+-]?[0-9]|GiB' big.txt && fail "n = 10^12: an exponent or a GiB figure left: $(cat big.txt)"
compare-arch --measure --sweep 8,16 --d 8 --repeats 1 --threads 1 --layers rnn --no-memory --format table > mt.txt ||
  fail "measured table exited $?"
grep -qF 'Measured forward time at n = 8, 16 ' mt.txt || fail "measured table does not name its n values: $(cat mt.txt)"

# --- a measurement, a gradient path, a learning run and the plot in one go (tiny)
compare-arch --measure --sweep 8,16 --d 8 --repeats 2 --threads 2 --layers rnn,attention,conv-stack \
  --gradient-path --n 12 --path-d 4 --learn --learn-n 4,6 --learn-steps 3 --learn-d 8 --learn-batch 4 \
  --plot p.svg --pretty > m.json || fail "full run exited $?"
python3 - <<'PY' || fail "full report: $(head -c 600 m.json)"
import json
m = json.load(open("m.json"))
t = m["measured"]["timings"]
assert len(t) == 2 * 3 * 2, len(t)                       # threads {1, 2} x 3 layers x 2 lengths
assert {x["threads"] for x in t} == {1, 2}
for x in t:
    assert len(x["seconds"]) == 2 and x["min_s"] <= x["median_s"] <= x["max_s"] and x["gflops_per_s"] > 0, x
assert len(m["measured"]["slopes"]) == 6
assert len(m["measured"]["memory"]) == 6 and all("analytic_bytes" in p for p in m["measured"]["memory"])
g = m["gradient_path"]
assert [c["layer"] for c in g["curves"]] == ["rnn", "lstm", "conv-stack", "attention-tiled"]
assert all(len(c["norm"]) == 12 for c in g["curves"]) and g["exact"] is True
l = m["learned"]["runs"]
assert [(r["layer"], r["n"]) for r in l] == [(a, n) for n in (4, 6) for a in ("rnn", "attention", "conv-stack")], l
assert all(r["steps"] == 3 and 0 <= r["accuracy"] <= 1 for r in l)
PY
grep -q '^<svg' p.svg && [[ "$(grep -c '<polyline' p.svg)" -ge 13 ]] || fail "plot: $(head -c 300 p.svg)"

# --- a sweep of one distinct n: times, no slope (and no failure after the work)
compare-arch --measure --sweep 16,16 --d 4 --layers rnn --repeats 1 --no-memory --threads 1 > one.json ||
  fail "one-length sweep exited $?"
python3 -c "import json; m = json.load(open('one.json'))['measured']; assert len(m['timings']) == 2 and m['slopes'] == [], m" ||
  fail "one-length sweep: $(cat one.json)"

# --- the same seed gives the same analytic and gradient-path bits
compare-arch --gradient-path --n 10 --path-d 3 --seed 4 > g1.json
compare-arch --gradient-path --n 10 --path-d 3 --seed 4 > g2.json
python3 -c "import json; a, b = (json.load(open(f)) for f in ('g1.json', 'g2.json')); assert a['gradient_path'] == b['gradient_path']" ||
  fail "gradient path not deterministic"

# --- bad values: exit 2 (usage) before any work, nothing on stdout, no plot left behind
expect_error 2 "--n: 0 is out of range, expected 1 to 1099511627776" compare-arch --n 0
expect_error 2 "--k: 1 is out of range, expected 2 to 1048576" compare-arch --k 1
expect_error 2 "--r: 1 is out of range, expected 2 to 1073741824" compare-arch --r 1
expect_error 2 "--d: -3 is out of range, expected 1 to 1048576" compare-arch --d -3
expect_error 2 '--sweep "16,x": "x" is not an integer >= 1' compare-arch --measure --sweep 16,x
expect_error 2 '--sweep "": "" is not an integer >= 1' compare-arch --measure --sweep ''
expect_error 2 '--sweep "16,0": "0" is not an integer >= 1' compare-arch --measure --sweep 16,0
expect_error 2 '--learn-n "1": "1" is not an integer >= 2' compare-arch --learn --learn-n 1
expect_error 2 'unknown layer type "cnn" (known: conv, conv-stack' compare-arch --measure --layers rnn,cnn
expect_error 2 "--format: yaml not in {json,table}" compare-arch --format yaml
expect_error 2 "--plot draws the measurement" compare-arch --plot x.svg
expect_error 2 "--threads: 999 is not a thread count" compare-arch --threads 999
[[ ! -e x.svg ]] || fail "a refused run left x.svg"
# a size whose memory the machine does not have: exit 1, at once (the n x n weights of n = 10^7 are 800 TB)
expect_error 1 "more than the" compare-arch --measure --sweep 16,10000000 --plot y.svg
[[ ! -e y.svg ]] || fail "a refused run left y.svg"
expect_error 1 "--gradient-path needs about" compare-arch --gradient-path --n 100000000 --path-d 64

# --- the --help examples run as written (the measurement one in its smallest form is the second line)
compare-arch --help > help.txt
grep -q "compare-arch --measure --sweep 16,64,256 --d 64 --repeats 3 --format table" help.txt || fail "help lacks the measure example"
while IFS= read -r line; do
  cmd="${line#  }"
  [[ "$cmd" == compare-arch* ]] || continue
  bash -c "set -o pipefail; $cmd" > /dev/null 2> err.txt || fail "help example failed: $cmd ($(cat err.txt))"
done < <(sed -n '/^Examples:/,$p' help.txt)
finish compare_arch

#!/usr/bin/env bash
# Hostile input and command lines (docs/hardening.md): each case exits with the expected status
# and a message that says what is wrong; nothing on stdout on failure; no crash.
set -uo pipefail
source_dir="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
fixtures="$source_dir/tests/fixtures"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
cases=0

# expect STATUS 'stderr pattern (grep -E)' command...
expect() {
  local want="$1" pattern="$2"
  shift 2
  cases=$((cases + 1))
  "$@" >out.txt 2>err.txt
  local rc=$?
  if [[ $rc -ne $want ]]; then
    echo "FAIL: $* -> exit $rc, expected $want; stderr: $(cat err.txt)" >&2
    failures=$((failures + 1))
  elif [[ -n "$pattern" ]] && ! grep -qE -- "$pattern" err.txt; then
    echo "FAIL: $* -> stderr does not match /$pattern/: $(cat err.txt)" >&2
    failures=$((failures + 1))
  elif [[ $rc -ne 0 && -s out.txt ]]; then
    echo "FAIL: $* -> exit $rc but wrote to stdout: $(head -c 200 out.txt)" >&2
    failures=$((failures + 1))
  fi
}

# --- sizes ---
echo '{"shape": [4294967296, 4294967296, 4294967296], "data": []}' > overflow.json
expect 1 'overflow.json:1:1: flat tensor of shape \[4294967296, 4294967296, 4294967296\] has more than' tensor show overflow.json
echo '{"shape": [1000, 1000], "data": [1, 2, 3]}' > declared.json
expect 1 'declared.json:1:1: flat tensor of shape \[1000, 1000\] has more than 1000 elements' tensor show declared.json --max-elements 1000
tensor arange 1001 > arange.json
expect 1 'arange.json:1:[0-9]+: tensor has more than 1000 elements \(see --max-elements\)' tensor reshape arange.json --shape -1 --max-elements 1000
expect 0 '' tensor reshape arange.json --shape -1 --max-elements 1001
printf '%100000s' '' | tr ' ' '[' > deep.json
expect 1 'deep.json:1:65: nesting deeper than 64 levels' tensor show deep.json
for i in $(seq 1 20000); do printf '{"a":'; done > deep_objects.json
expect 1 'nesting deeper than 64 levels' tensor get deep_objects.json#a
expect 1 'nesting deeper than 64 levels' tensor show - < deep.json

# --- odd tensors ---
echo '[]' > empty.json
expect 0 '' tensor show empty.json
echo '[[], []]' > empty2.json
expect 0 '' tensor transpose empty2.json
echo '7' > scalar.json
expect 1 'transpose: 2 axes given for a tensor of shape \[\]' tensor transpose scalar.json --axes 1,0
expect 1 'scalar.json: not a tensor: number 1e39 is out of the float32 range' bash -c 'echo "1e39" > scalar.json && tensor reshape scalar.json --shape 1'
echo '{"x": "abc", "y": [1, true], "z": {"w": null}}' > members.json
expect 1 'members.json#x: not a tensor: a string \(line 1, column 7\)' tensor reshape members.json#x --shape -1
expect 1 'members.json#y: not a tensor: an array holding a boolean \(write true and false as 1 and 0\) \(line 1, column 23\)' tensor get members.json#y
expect 1 'members.json#z/w: not a tensor: null' tensor get members.json#z/w
expect 1 'members.json#z: is a bundle, not a tensor \(has: w\)' tensor reshape members.json#z --shape -1
expect 1 'members.json: no tensor named "q" \(has: x, y, z\)' tensor get members.json#q
echo '{"a": [1], "b": [2], "a": [3]}' > dup.json
expect 1 'dup.json: not a tensor: an object with the key "a" twice \(line 1, column 22\)' tensor get dup.json
expect 1 'dup.json: cannot take "b" from an object with the key "a" twice' tensor get dup.json#b
echo '[[1, 2], [3]]' > ragged.json
expect 1 'ragged.json: not a tensor: ragged array: row 2 has 1 values, row 1 has 2' tensor reshape ragged.json --shape -1
echo '[1, "NaN", "Infinity", "-Infinity"]' > nonfinite.json
expect 1 'nonfinite.json: tensor of shape \[4\] has NaN at \[1\] \(pass --allow-nan to accept it\)' tensor reshape nonfinite.json --shape 2,2
expect 0 '' tensor reshape nonfinite.json --shape 2,2 --allow-nan
expect 2 'tensor in nonfinite.json has NaN at \[1\]' tensor diff nonfinite.json nonfinite.json
expect 0 '' tensor diff nonfinite.json nonfinite.json --allow-nan
echo '["nan", "inf"]' > lowercase.json
expect 1 'not a tensor: an array holding a string' tensor reshape lowercase.json --shape -1
printf '[1, 2]\n[3, 4, 5]\n' | tensor reshape - --shape 2,1 > /dev/null 2> err.txt
grep -q 'record 2: <stdin>: reshape: cannot reshape \[3\]' err.txt || { echo "FAIL: NDJSON record error: $(cat err.txt)" >&2; failures=$((failures + 1)); }
expect 1 '<stdin>:1:2: empty input' bash -c 'printf " " | tensor show -'
expect 1 'weird: cannot open \(No such file' tensor show 'weird#name.json'  # '#' starts a member name
expect 1 'nothere.json: cannot open \(No such file or directory\)' tensor show nothere.json
expect 1 '\.: is a folder, not a file' tensor show .

# --- command lines: exit 2 with the reason ---
expect 2 'not expected: --bogus' tensor show empty.json --bogus
expect 2 'A subcommand is required|subcommand' tensor
expect 2 'shape "2,-3": sizes must be non-negative' tensor randn --shape 2,-3
expect 2 'shape "2,a": "a" is not a size' tensor randn --shape 2,a
expect 2 'shape "-1,-1": only one size may be -1' tensor arange 6 --shape -1,-1
expect 2 'more elements than fit in 64 bits' tensor randn --shape 4294967296,4294967296,4294967296
expect 1 'linspace: 10000000000 values is more than --max-elements' tensor linspace 0 1 --shape 100000,100000
expect 1 'arange: 1000000000000000 values is more than --max-elements' tensor arange 0 1e15
expect 2 '--rtol: -1 is negative, expected a number >= 0' tensor diff empty.json empty.json --rtol -1
expect 2 '--atol: nan is not a number' tensor diff empty.json empty.json --atol nan
expect 2 '--max-elements: 0 is not positive, expected a number > 0' tensor show empty.json --max-elements 0
expect 2 '--max-elements: -5 is not positive, expected a number > 0' tensor show empty.json --max-elements -5
expect 2 '--seed: -1 is negative, expected a number >= 0' tensor randn --shape 2 --seed -1
expect 2 '--std must be non-negative' tensor randn --shape 2 --std -1
expect 2 '--low must not exceed --high' tensor rand --shape 2 --low 1 --high 0
expect 2 'STEP must not be zero' tensor arange 0 10 0
expect 2 '--format: xml not in' tensor show empty.json --format xml
expect 2 'is not NAME=REF' tensor pack =empty.json

# --- the tools that landed later: their own hostile inputs ---
if [[ -f "$source_dir/tests/cli/hostile_weights.inc" ]]; then
  # shellcheck source=/dev/null
  source "$source_dir/tests/cli/hostile_weights.inc"
fi

# --- streams where one document is expected: refused, never cut to the first record ---
lstm-run --init --input-size 2 --hidden-size 3 --seed 1 --save-weights w1.json
tensor randn --shape 3,2 --seed 1 > x32.json
expect 1 '<stdin>: holds more than one record; weights take one document' bash -c 'cat w1.json w1.json | lstm-run x32.json --weights -'
expect 1 'w2.ndjson: holds more than one record; weights take one document' bash -c 'cat w1.json w1.json > w2.ndjson; lstm-run x32.json --weights w2.ndjson'
# --save-weights is written only when the run succeeded
expect 1 'input' lstm-run nonfinite.json --weights w1.json --save-weights saved.json
[[ ! -e saved.json ]] || { echo "FAIL: --save-weights written by a failed run" >&2; failures=$((failures + 1)); }

# --- crashes and silent mistakes: refused with the option named ---
tensor randn --shape 4,8 --seed 1 > x48.json
expect 2 'threads: 100000 is not a thread count: give 0 \(one per core\) to 256' attn-score --self x48.json --heads 2 --split-heads --threads 100000
expect 2 'threads: 257 is not a thread count' lstm-run x32.json --weights w1.json --threads 257
expect 0 '' lstm-run x32.json --weights w1.json --threads 256
expect 2 '--split-heads requires --heads' attn-score --self x48.json --split-heads
expect 2 '--save-layout requires --save-weights' lstm-run x32.json --weights w1.json --save-layout cs231n
expect 2 '--save-weights - and the result would share standard output' lstm-run x32.json --weights w1.json --save-weights -
lstm-run --weights w1.json --save-weights - > w_stdout.json 2>err.txt && cmp -s w_stdout.json w1.json && [[ ! -e ./- ]] ||
  { echo "FAIL: --save-weights - should write the weights to standard output: $(cat err.txt)" >&2; failures=$((failures + 1)); }
expect 1 'init: weight_ih_l0 \[400000, 1000000\] has 400000000000 elements, more than --max-elements' lstm-run x32.json --init --input-size 1000000 --hidden-size 100000
expect 1 'init: weight_hh_l0 \[40, 10\] has 400 elements, more than --max-elements 300' lstm-run x32.json --init --input-size 2 --hidden-size 10 --max-elements 300
tensor rand --shape 1000 --seed 3 --low -2e38 --high 2e38 --format flat > wide.json
python3 -c '
import json, sys
d = json.load(open("wide.json"))["data"]
bad = [x for x in d if not isinstance(x, (int, float)) or not (-2e38 <= x < 2e38)]
sys.exit(1 if bad or max(d) < 1e38 or min(d) > -1e38 else 0)' ||
  { echo "FAIL: rand --low -2e38 --high 2e38 left [low, high): $(head -c 200 wide.json)" >&2; failures=$((failures + 1)); }

# --- messages that help ---
expect 2 'tensor: unknown subcommand "bogus" \(subcommands: linspace, arange, randn, rand, show, get, cat, stack, select, reshape, transpose, pack, diff\)' tensor bogus
expect 2 'attn-score: --mask casual: not one of causal, causal-lower-right and no file of that name' attn-score --query x48.json --keys x48.json --mask casual
echo '[2, 1, 1]' > len29.json
tensor randn --shape 2,3,8 --seed 1 > q238.json
expect 1 '^attn-score: len29.json: key lengths has shape \[3\], expected \[2\] \(one length per sequence\)' attn-score --query q238.json --keys q238.json --key-lengths len29.json
grep -q 'attn-score: attn-score:' err.txt && { echo "FAIL: doubled prefix: $(cat err.txt)" >&2; failures=$((failures + 1)); }
tensor pack weight_ih_l0=<(tensor randn --shape 8,2) weight_hh_l0=<(tensor randn --shape 8,1) weight_hr_l0=<(tensor randn --shape 1,2) \
  bias_ih_l0=<(tensor randn --shape 8) bias_hh_l0=<(tensor randn --shape 8) > proj.json
expect 1 'proj.json: weight_hr_l0: proj_size is not supported' lstm-run x32.json --weights proj.json
echo '[[true, false, true, true]]' > boolmask.json
expect 1 'an array holding a boolean \(write true and false as 1 and 0\)' attn-score --self x48.json --heads 2 --split-heads --mask boolmask.json

echo "hostile_input: $cases cases, $failures failures"
[[ $failures -eq 0 ]]

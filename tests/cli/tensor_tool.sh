#!/usr/bin/env bash
# The `tensor` tool end to end: every subcommand, numpy's own values and text, diff's exit
# statuses, every error path (message, exit status, nothing on stdout, no output file left).
# Run by ctest with build/bin first on PATH and ATTNKIT_SOURCE set.
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
fixtures="$src/tests/fixtures"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# run 'COMMAND LINE' [STDIN]: runs it with bash, sets $out, $err, $rc
run() {
  local cmd="$1"
  if [[ $# -ge 2 ]]; then
    out="$(printf '%s' "$2" | bash -c "$cmd" 2>"$work/.err")"
  else
    out="$(bash -c "$cmd" </dev/null 2>"$work/.err")"
  fi
  rc=$?
  err="$(cat "$work/.err")"
}

# ok 'COMMAND' 'EXPECTED STDOUT' [STDIN]: exit 0, exact stdout, empty stderr
ok() {
  run "$1" "${@:3}"
  [[ $rc -eq 0 ]] || fail "$1: exit $rc (stderr: $err)"
  [[ "$out" == "$2" ]] || fail "$1: stdout"$'\n'"  got:  $out"$'\n'"  want: $2"
  [[ -z "$err" ]] || fail "$1: unexpected stderr: $err"
}

# bad 'COMMAND' STATUS 'EXPECTED STDERR' [STDIN]: that exit status, that stderr, nothing on stdout
bad() {
  run "$1" "${@:4}"
  [[ $rc -eq $2 ]] || fail "$1: exit $rc, want $2 (stderr: $err)"
  [[ -z "$out" ]] || fail "$1: stdout not empty on failure: $out"
  [[ "$err" == "$3" ]] || fail "$1: stderr"$'\n'"  got:  $err"$'\n'"  want: $3"
}

usage() { printf '%s\n(run tensor --help for usage)' "tensor: $1"; }

# --- making tensors -------------------------------------------------------------------------
ok "tensor linspace 0 1 --shape 5" "[0,0.25,0.5,0.75,1]"
ok "tensor linspace -1 1 --shape 2,3 --format flat" '{"shape":[2,3],"data":[-1,-0.6,-0.2,0.2,0.6,1]}'
ok "tensor linspace 0 1 --shape 2,2 --pretty" $'[[0, 0.33333334],\n [0.6666667, 1]]'
ok "tensor linspace 0 1 --shape 0" "[]"
ok "tensor linspace 5 5 --shape ''" "5"
ok "tensor arange 4" "[0,1,2,3]"
ok "tensor arange 2 5" "[2,3,4]"
ok "tensor arange 1 0 -0.25" "[1,0.75,0.5,0.25]"
ok "tensor arange 12 --shape 3,-1" "[[0,1,2,3],[4,5,6,7],[8,9,10,11]]"
ok "tensor arange 5 2" "[]"
# the generators: fixed values (tests/fixtures/rng.json), the same on every compiler
ok "tensor randn --shape 3 --seed 0" "[-0.809237,-0.7457425,0.18554305]"
ok "tensor rand --shape 3 --seed 1" "[0.6071146,0.0476377,0.80700636]"
ok "tensor randn --shape 2 --seed 1 --mean 1 --std 2" "[1.9584091,-0.014681101]"
ok "tensor rand --shape 1,2 --seed 1 --low -1 --high 1" "[[0.21422923,-0.9047246]]"
run "tensor randn --shape 4,5 --seed 9"; a="$out"
run "tensor randn --shape 4,5 --seed 9"; [[ "$out" == "$a" ]] || fail "randn is not deterministic"
run "tensor randn --shape 4,5 --seed 10"; [[ "$out" != "$a" ]] || fail "randn ignores --seed"
run "tensor randn --shape 4,5"; [[ "$out" == "$(tensor randn --shape 4,5 --seed 0)" ]] || fail "randn: default seed is not 0"

# numpy's linspace/arange values, bit for bit (tests/fixtures/numpy, written by gen_numpy.py)
while IFS=$'\t' read -r name args; do
  run "tensor $args | tensor diff - '$fixtures/numpy/$name.json' --rtol 0 --atol 0 -q"
  [[ $rc -eq 0 ]] || fail "tensor $args differs from numpy ($name): $err"
done <"$fixtures/numpy/ranges.tsv"

# --- show: numpy's own text -------------------------------------------------------------------
run "tensor linspace -0.4 1.2 --shape 3,4 | tensor show -"
[[ $rc -eq 0 && "$out"$'\n' == "$(cat "$fixtures/numpy/show/linspace_3x4.txt")"$'\n' ]] ||
  fail "linspace -0.4 1.2 --shape 3,4 | show differs from numpy:"$'\n'"$out"
for f in "$fixtures"/numpy/show/*.json; do
  run "tensor show '$f'"
  [[ $rc -eq 0 && "$out" == "$(cat "${f%.json}.txt")" ]] || fail "tensor show $(basename "$f") differs from numpy:"$'\n'"$out"
done
ok "tensor show -" $'tensor([1., 2.], shape=[2])\ntensor([3.], shape=[1])' $'[1, 2]\n[3]\n'
ok "tensor show" "tensor(7., shape=[])" "7"  # REF defaults to -
ok "tensor show -#b" "tensor([2.], shape=[1])" '{"a": [1], "b": [2]}'
ok "tensor show -" $'a: tensor([1.], shape=[1])\nc/d: tensor([[2.]], shape=[1, 1])\nname: (not a tensor: a string (line 1, column 39))' \
  '{"a": [1], "c": {"d": [[2]]}, "name": "x"}'
ok "tensor show -" "tensor([ nan,  inf, -inf], shape=[3])" '["NaN", "Infinity", "-Infinity"]'

# --- get, reshape, transpose, pack ------------------------------------------------------------
printf '{"output": [[1, 2], [3, 4]], "state": {"h_n": [5], "c_n": [6]}, "cell": "lstm"}' >run.json
ok "tensor get run.json#output" "[[1,2],[3,4]]"
ok "tensor get run.json#state/c_n --format flat" '{"shape":[1],"data":[6]}'
ok "tensor get run.json#state" '{"h_n":[5],"c_n":[6]}'
ok "tensor get run.json" '{"output":[[1,2],[3,4]],"state":{"h_n":[5],"c_n":[6]},"cell":"lstm"}'
ok "tensor get run.json#output --pretty" $'[[1, 2],\n [3, 4]]'
ok "tensor get -#output" "[[1,2],[3,4]]" "$(cat run.json)"
ok "tensor get -#a" $'[1]\n[2,3]' $'{"a": [1]}\n{"a": [2, 3]}\n'  # NDJSON: one line per record
ok "tensor get - --format flat" '{"shape":[2],"data":[1,"NaN"]}' '[1, "NaN"]'
ok "tensor reshape run.json#output --shape 4" "[1,2,3,4]"
ok "tensor reshape run.json#output --shape -1,1" "[[1],[2],[3],[4]]"
ok "tensor reshape - --shape 1,2" $'[[1,2]]\n[[3,4]]' $'[1,2]\n[3,4]\n'
ok "tensor transpose run.json#output" "[[1,3],[2,4]]"
ok "tensor arange 24 --shape 2,3,4 | tensor transpose - --axes 1,0,2 | tensor get - --format flat" \
  '{"shape":[3,2,4],"data":[0,1,2,3,12,13,14,15,4,5,6,7,16,17,18,19,8,9,10,11,20,21,22,23]}'
ok "tensor arange 6 --shape 2,3 | tensor transpose - --axes -1,0" "[[0,3],[1,4],[2,5]]"
tensor arange 3 >x.json
ok "tensor pack x=x.json out=run.json#output deep/h=run.json#state/h_n" '{"x":[0,1,2],"out":[[1,2],[3,4]],"deep":{"h":[5]}}'
ok "tensor pack a=-#output b=- " '{"a":[[1,2],[3,4]],"b":{"output":[[1,2],[3,4]],"state":{"h_n":[5],"c_n":[6]},"cell":"lstm"}}' \
  "$(cat run.json)"
ok "tensor pack a/b=x.json a/c=x.json --format flat --pretty" \
  $'{\n  "a": {\n    "b": {"shape": [3], "data": [0, 1, 2]},\n    "c": {"shape": [3], "data": [0, 1, 2]}\n  }\n}'

# --- diff: 0 equal within tolerance, 1 differ (largest errors reported), 2 trouble ------------
printf '[[1, 2], [3, 4]]' >a.json
printf '[[1, 2], [3, 4.001]]' >b.json
printf '[[1, 2, 3, 4]]' >c.json
ok "tensor diff a.json a.json" \
  '{"equal":true,"shape":[2,2],"mismatches":0,"max_abs_error":0,"max_abs_error_at":[0,0],"max_rel_error":0,"max_rel_error_at":[0,0]}'
run "tensor diff a.json b.json"
[[ $rc -eq 1 ]] || fail "diff of different tensors: exit $rc, want 1"
[[ "$out" == '{"equal":false,"shape":[2,2],"mismatches":1,"max_abs_error":0.0009999275,"max_abs_error_at":[1,1],"max_rel_error":0.0002499194,"max_rel_error_at":[1,1],"first_mismatch_at":[1,1]}' ]] ||
  fail "diff report: $out"
[[ "$err" == "tensor diff: 1 of 4 values differ; largest absolute error 0.0009999275207519531 at [1, 1], largest relative error 0.0002499194048652646 at [1, 1]" ]] ||
  fail "diff summary: $err"
ok "tensor diff a.json b.json --atol 1e-3" \
  '{"equal":true,"shape":[2,2],"mismatches":0,"max_abs_error":0.0009999275,"max_abs_error_at":[1,1],"max_rel_error":0.0002499194,"max_rel_error_at":[1,1]}'
ok "tensor diff a.json b.json --rtol 3e-4 -q" ""
run "tensor diff a.json b.json --quiet"
[[ $rc -eq 1 && -z "$out" && -z "$err" ]] || fail "diff --quiet: exit $rc, stdout '$out', stderr '$err'"
run "tensor diff a.json c.json"
[[ $rc -eq 1 && "$err" == "tensor diff: tensor has shape [2, 2] in a.json and [1, 4] in c.json" ]] || fail "diff of shapes: $rc $err"
run "tensor diff -#a -#b" '{"a": {"x": [1], "y": [2]}, "b": {"x": [1], "z": [2]}}'
[[ $rc -eq 1 && "$err" == 'tensor diff: "y" is only in -#a; "z" is only in -#b' ]] || fail "diff of bundles: $rc $err"
bad "tensor diff a.json missing.json" 2 "tensor: missing.json: cannot open (No such file or directory)"
bad "tensor diff a.json -" 2 "tensor: <stdin>:1:4: expected ',' or ']' in an array, found '2'" "[1 2]"
bad "tensor diff - a.json" 2 "tensor: tensor in - has NaN at [1] (pass --allow-nan to compare NaNs as equal)" '[1, "NaN"]'
ok "tensor diff - - --allow-nan -q" "" '[1, "NaN"]'
bad "tensor diff a.json" 2 "$(usage "B is required")"
bad "tensor diff a.json b.json --rtol -1" 2 "$(usage "--rtol: -1 is negative, expected a number >= 0")"
bad "tensor diff a.json b.json --atol x" 2 "$(usage "--atol: x is not a number")"

# --- errors: bad input exits 1 with the position; usage errors exit 2 --------------------------
printf '[[1, 2],\n [3, 4],\n [5, 6, 7, 8, 9,x]]' >x3.json
bad "tensor show x3.json" 1 "tensor: x3.json:3:17: expected a number, found 'x'"
printf '[[1, 2, 3, 4],\n [5, 6, 7]]' >ragged.json
bad "tensor get ragged.json" 1 "tensor: ragged.json: not a tensor: ragged array: row 2 has 3 values, row 1 has 4 (line 2, column 2)"
bad "tensor reshape ragged.json --shape 7" 1 "tensor: ragged.json: not a tensor: ragged array: row 2 has 3 values, row 1 has 4 (line 2, column 2)"
printf '{"output": [1], "c_n": [2]}' >bundle.json
bad "tensor get bundle.json#h_n" 1 'tensor: bundle.json: no tensor named "h_n" (has: output, c_n)'
bad "tensor get -#h_n" 1 'tensor: <stdin>: no tensor named "h_n" (has: output, c_n)' "$(cat bundle.json)"
bad "tensor transpose bundle.json" 1 "tensor: bundle.json: is a bundle, not a tensor (has: output, c_n); pick one with #NAME"
bad "tensor get missing.json" 1 "tensor: missing.json: cannot open (No such file or directory)"
bad "tensor get ." 1 "tensor: .: is a folder, not a file"
ok "tensor show <(tensor arange 3)" "tensor([0., 1., 2.], shape=[3])"  # pipes and FIFOs read to their end
bad "tensor get -" 1 "tensor: <stdin>:1:1: empty input, expected a JSON value" ""
bad "tensor get -" 1 'tensor: <stdin>:1:5: expected a number, found NaN (JSON has no NaN: write the string "NaN")' "[1, NaN]"
bad "tensor get -" 1 "tensor: <stdin>: not a tensor: number 1e39 is out of the float32 range (write \"Infinity\" for infinity) (line 1, column 2)" "[1e39]"
# a stream's records are written as they are made: record 1 stays written when record 2 fails
run "tensor get -#a" $'{"a": [1]}\n{"b": [2]}\n'
[[ $rc -eq 1 && "$out" == "[1]" && "$err" == 'tensor: record 2: <stdin>: no tensor named "a" (has: b)' ]] ||
  fail "record 2 fails: exit $rc, stdout $out, stderr $err"
run "tensor get -#a -o rec.json" $'{"a": [1]}\n{"b": [2]}\n'
[[ $rc -eq 1 && ! -e rec.json ]] || fail "-o: a stream that fails at record 2 left rec.json"
bad "tensor get -" 1 "tensor: <stdin>:1:5: expected the end of the line after a JSON document" "[1] [2]"
bad "tensor get - --max-elements 3" 1 "tensor: <stdin>:1:11: tensor has more than 3 elements (see --max-elements)" "[1, 2, 3, 4]"
bad "tensor get -" 1 "tensor: <stdin>:1:1: flat tensor of shape [1000000, 1000000, 1000000] has more than 1073741824 elements (see --max-elements)" \
  '{"shape": [1000000, 1000000, 1000000], "data": []}'
bad "tensor get -" 1 "tensor: <stdin>:1:65: nesting deeper than 64 levels" "$(head -c 100000 /dev/zero | tr '\0' '[')"
bad "tensor reshape - --shape 2" 1 "tensor: <stdin>: tensor of shape [2] has NaN at [1] (pass --allow-nan to accept it)" '[1, "NaN"]'
ok "tensor reshape - --shape 2 --allow-nan" '[1,"NaN"]' '[1, "NaN"]'
bad "tensor reshape a.json --shape 3" 1 "tensor: a.json: reshape: cannot reshape [2, 2] (4 values) to [3] (3 values)"
bad "tensor transpose a.json --axes 0,0" 1 "tensor: a.json: transpose: axes [0, 0] are not a permutation of 0..1"
bad "tensor pack a=x.json a=x.json" 1 'tensor: bundle: the name "a" is given twice'
bad "tensor pack a=bundle.json#nope" 1 'tensor: bundle.json: no tensor named "nope" (has: output, c_n)'
bad "tensor linspace 0 1 --shape 100000,100000" 1 "tensor: linspace: 10000000000 values is more than --max-elements 1073741824"
bad "tensor arange 1e12" 1 "tensor: arange: 1000000000000 values is more than --max-elements 1073741824"
bad "tensor randn --shape 10,10 --max-elements 99" 1 "tensor: randn: 100 values is more than --max-elements 99"

bad "tensor" 2 "$(usage "A subcommand is required")"
bad "tensor frobnicate" 2 "$(usage 'unknown subcommand "frobnicate" (subcommands: linspace, arange, randn, rand, show, get, cat, stack, select, reshape, transpose, pack, diff)')"
bad "tensor linspace 0 1 --shape 3 --bogus" 2 "$(usage "The following argument was not expected: --bogus")"
bad "tensor linspace 0 1" 2 "$(usage "--shape is required")"
bad "tensor linspace 0 --shape 3" 2 "$(usage "HI is required")"
bad "tensor linspace 0 1 --shape -3" 2 "$(usage 'shape "-3": sizes must be non-negative')"
bad "tensor linspace 0 1 --shape 3,a" 2 "$(usage 'shape "3,a": "a" is not a size')"
bad "tensor linspace 0 1 --shape 3,,4" 2 "$(usage 'shape "3,,4": a size is missing (write sizes like 3,4)')"
bad "tensor linspace 0 1 --shape -1" 2 "$(usage 'shape "-1": sizes must be non-negative')"
bad "tensor reshape a.json --shape -2,2" 2 "$(usage 'shape "-2,2": sizes must be non-negative (or one -1)')"
bad "tensor arange 0 1 0" 2 "$(usage "arange: STEP must not be zero")"
bad "tensor arange 1 2 3 4" 2 "$(usage "ARGS: At Most 3 required but received 4")"
bad "tensor randn --shape 2 --std -1" 2 "$(usage "randn: --std must be non-negative")"
bad "tensor rand --shape 2 --low 1 --high 0" 2 "$(usage "rand: --low must not exceed --high")"
bad "tensor get" 2 "$(usage "REF is required")"
bad "tensor pack" 2 "$(usage "NAME=REF is required")"
bad "tensor pack x" 2 "$(usage 'pack: "x" is not NAME=REF')"
bad "tensor get a.json --format xml" 2 "$(usage "--format: xml not in {nested,flat}")"
bad "tensor get a.json --max-elements 0" 2 "$(usage "--max-elements: 0 is not positive, expected a number > 0")"

# --- -o FILE: atomic; nothing left behind on failure ---------------------------------------------
mkdir out && cd out
ok "tensor linspace 0 1 --shape 3 -o y.json" ""
[[ "$(cat y.json)" == "[0,0.5,1]" ]] || fail "-o: wrote $(cat y.json)"
ln y.json old.json  # a second name for the old file: an atomic replace leaves it untouched
ok "tensor arange 2 -o y.json" ""
[[ "$(cat y.json)" == "[0,1]" && "$(cat old.json)" == "[0,0.5,1]" ]] || fail "-o did not replace atomically"
bad "tensor get ../missing.json -o z.json" 1 "tensor: ../missing.json: cannot open (No such file or directory)"
bad "tensor get - -o y.json" 1 "tensor: <stdin>:1:2: expected a JSON value, found 'x'" "[x]"
[[ "$(cat y.json)" == "[0,1]" ]] || fail "-o: a failed run changed the existing file"
bad "tensor linspace 0 1 --shape -3 -o z.json" 2 "$(usage 'shape "-3": sizes must be non-negative')"
bad "tensor diff ../a.json ../b.json -o z.json" 1 "tensor diff: 1 of 4 values differ; largest absolute error 0.0009999275207519531 at [1, 1], largest relative error 0.0002499194048652646 at [1, 1]"
[[ -f z.json ]] && rm z.json || fail "diff -o: the report should be written even when the tensors differ"
bad "tensor arange 3 -o no/such/dir/z.json" 1 "tensor: no/such/dir/z.json: cannot create a temporary file in no/such/dir/ (No such file or directory)"
[[ "$(ls -A | sort | tr '\n' ' ')" == "old.json y.json " ]] || fail "-o left files behind: $(ls -A)"
ok "tensor show ../a.json -o shown.txt" ""
[[ "$(cat shown.txt)" == $'tensor([[1., 2.],\n        [3., 4.]], shape=[2, 2])' ]] || fail "show -o: $(cat shown.txt)"
cd ..

# --- shapes survive the wire (a size 0 of rank >= 2 is written flat; flat sizes are exact integers)
ok "tensor arange 0 --shape 2,0,4" '{"shape":[2,0,4],"data":[]}'
ok "tensor arange 0 --shape 2,0,4 | tensor reshape - --shape 0,8 | tensor get -" '{"shape":[0,8],"data":[]}'
ok "tensor get - --format flat" '{"shape":[16777217,0],"data":[]}' '{"shape": [16777217, 0], "data": []}'
ok "tensor show -" "tensor([], shape=[16777217, 0])" '{"shape": [16777217, 0], "data": []}'
bad "tensor get - --max-elements 16777216" 1 "tensor: <stdin>:1:1: flat tensor of shape [16777217] has more than 16777216 elements (see --max-elements)" '{"shape": [16777217], "data": []}'

# --- streams: every tool treats every record -------------------------------------------------
# diff and pack pair the records of two streams; one document goes with every record
run "(tensor arange 3; tensor arange 3 | tensor reshape - --shape 1,3) | tensor diff - <(tensor arange 3) -q"
[[ $rc -eq 1 ]] || fail "diff: a differing second record must give exit 1, got $rc ($err)"
run "(tensor arange 3; tensor arange 3) | tensor diff - <(tensor arange 3) -q"
[[ $rc -eq 0 ]] || fail "diff: two equal records: exit $rc ($err)"
ok "(tensor arange 3; tensor arange 2) | tensor pack a=- b=-" $'{"a":[0,1,2],"b":[0,1,2]}\n{"a":[0,1],"b":[0,1]}'
ok "(tensor arange 3; tensor arange 2) | tensor pack a=- b=<(tensor arange 4; tensor arange 5)" $'{"a":[0,1,2],"b":[0,1,2,3]}\n{"a":[0,1],"b":[0,1,2,3,4]}'
ok "(tensor arange 3; tensor arange 2) | tensor pack a=- one=<(tensor arange 1)" $'{"a":[0,1,2],"one":[0]}\n{"a":[0,1],"one":[0]}'
run "(tensor arange 3; tensor arange 2; tensor arange 1) | tensor diff - <(tensor arange 3; tensor arange 2) -q"
[[ $rc -eq 2 && "$err" == *"ends after 2 records"*"streams are paired record by record"* ]] || fail "diff: streams of 3 and 2 records: exit $rc ($err)"
# a file holding several documents is a stream, as standard input is
printf '[1, 2]\n[3, 4]\n' > two.ndjson
ok "tensor show two.ndjson" $'tensor([1., 2.], shape=[2])\ntensor([3., 4.], shape=[2])'
ok "tensor reshape two.ndjson --shape 2,1 -o out.ndjson && tensor get out.ndjson" $'[[1],[2]]\n[[3],[4]]'
ok "tensor pack x=two.ndjson | tensor get -#x" $'[1,2]\n[3,4]'
# records are written as they are made: the first line comes before the second record exists
start=$(date +%s%N)
first=$( (tensor arange 3; sleep 4; tensor arange 4) | tensor get - | { IFS= read -r line; echo "$(( ($(date +%s%N) - start) / 1000000 )) $line"; cat >/dev/null; })
[[ "${first#* }" == "[0,1,2]" && "${first%% *}" -lt 3500 ]] || fail "stream: first record not written before the next arrived ($first ms)"
# memory is bounded by the record, not the stream: 4000 records of [8, 64] (22 MB) in under 40 MB
tensor randn --shape 8,64 --seed 1 > rec.json
for i in $(seq 4000); do cat rec.json; done > many.ndjson
if [[ -x /usr/bin/time ]]; then
  /usr/bin/time -f '%M' -o rss.txt tensor get - < many.ndjson | cmp -s - many.ndjson || fail "stream of 4000 records changed"
  # (not under AddressSanitizer: its quarantine keeps freed memory, up to 256 MB, by design)
  [[ -n "${ASAN_OPTIONS:-}" ]] || (( $(cat rss.txt) < 40000 )) || fail "stream of 22 MB peaked at $(cat rss.txt) KB"
fi

# --- slicing and selecting (expected values: numpy 1.24, a = np.arange(24).reshape(2, 3, 4)) ------
tensor arange 24 --shape 2,3,4 > a24.json
while IFS=' ' read -r spec want; do
  run "tensor get a24.json --index '$spec'"
  [[ $rc -eq 0 && "$out" == "$want" ]] || fail "get --index '$spec': got $out ($err), numpy gives $want"
done <<'EOF'
-1 [[12,13,14,15],[16,17,18,19],[20,21,22,23]]
0,:,2:5 [[2,3],[6,7],[10,11]]
::-1 [[[12,13,14,15],[16,17,18,19],[20,21,22,23]],[[0,1,2,3],[4,5,6,7],[8,9,10,11]]]
1,::2,-1 [15,23]
:,-1 [[8,9,10,11],[20,21,22,23]]
0,1,::-2 [7,5]
0,-4:-1:1 [[0,1,2,3],[4,5,6,7]]
1,-1:-10:-1,3 [23,19,15]
-2,:2,::3 [[0,3],[4,7]]
0,1,1 5
0:2:9223372036854775807 [[[0,1,2,3],[4,5,6,7],[8,9,10,11]]]
::-9223372036854775808 [[[12,13,14,15],[16,17,18,19],[20,21,22,23]]]
0,2:0:-9223372036854775807 [[8,9,10,11]]
EOF
bad "tensor get a24.json --index 0,5" 1 "tensor: a24.json: index \"0,5\": 5 is out of range for axis 1 of size 3 (tensor [2, 3, 4])"
bad "tensor get a24.json --index ::0" 1 "tensor: a24.json: index \"::0\": step \"0\" is not a non-zero integer"
ok "tensor cat <(tensor arange 3) <(tensor arange 2)" "[0,1,2,0,1]"
ok "tensor cat <(tensor arange 6 --shape 2,3) <(tensor arange 4 --shape 2,2) --axis -1" "[[0,1,2,0,1],[3,4,5,2,3]]"
ok "tensor stack <(tensor arange 3) <(tensor arange 3) --axis 1" "[[0,0],[1,1],[2,2]]"
ok "tensor stack a24.json a24.json | tensor get - --index '1,1,2'" "[20,21,22,23]"
run "tensor stack <(tensor arange 3) <(tensor arange 2)"
[[ $rc -eq 1 && "$err" == *"stacked tensors have one shape"* ]] || fail "stack of [3] and [2]: $rc $err"
# a state_dict's flat keys select as a bundle, the prefix stripped; references take the prefix too
tensor pack enc.weight_ih_l0=<(tensor arange 2) enc.bias_ih_l0=<(tensor arange 3) dec.weight=<(tensor arange 1) > sd.json
ok "tensor select sd.json enc." '{"weight_ih_l0":[0,1],"bias_ih_l0":[0,1,2]}'
ok "tensor get sd.json#enc." '{"weight_ih_l0":[0,1],"bias_ih_l0":[0,1,2]}'
ok "tensor get sd.json#enc./bias_ih_l0" '[0,1,2]'
ok "tensor select sd.json enc. dec.weight" '{"enc":{"weight_ih_l0":[0,1],"bias_ih_l0":[0,1,2]},"dec.weight":[0]}'
bad "tensor get sd.json#x." 1 'tensor: sd.json: no member starts with "x." (has: enc.weight_ih_l0, enc.bias_ih_l0, dec.weight)'
# references take an index after a name: FILE#NAME[INDEX] (numpy, as get --index)
tensor pack a=a24.json > b24.json
ok "tensor get 'b24.json#a[-1,:,1]'" "[13,17,21]"
ok "tensor get '-#a[0,1]'" "[4,5,6,7]" "$(cat b24.json)"
ok "tensor cat 'b24.json#a[0,0]' 'b24.json#a[1,2,::-1]'" "[0,1,2,3,23,22,21,20]"
bad "tensor get 'b24.json#a[0,5]'" 1 'tensor: b24.json#a[0,5]: index "0,5": 5 is out of range for axis 1 of size 3 (tensor [2, 3, 4])'
bad "tensor get 'b24.json#a[0'" 1 'tensor: reference "b24.json#a[0": write an index after a name, as in #h_n[-1] or #output[:,0]'
bad "tensor get 'b24.json#a[]'" 1 'tensor: reference "b24.json#a[]": write an index after a name, as in #h_n[-1] or #output[:,0]'
bad "tensor get 'b24.json#[0]'" 1 'tensor: reference "b24.json#[0]": write an index after a name, as in #h_n[-1] or #output[:,0]'
bad "tensor get 'b24.json#a[0]/x'" 1 'tensor: reference "b24.json#a[0]/x": write an index after a name, as in #h_n[-1] or #output[:,0]'
# slicing in a pipe, record by record
ok "(tensor arange 6 --shape 2,3; tensor arange 4 --shape 2,2) | tensor get - --index ':,-1'" $'[2,5]\n[1,3]'

# --- --help and --version --------------------------------------------------------------------------
run "tensor --help"
[[ $rc -eq 0 && "$out" == *"Examples:"* && "$out" == *"tensor linspace -0.4 1.2 --shape 3x4 | tensor show -"* ]] || fail "--help has no example"
for sub in linspace arange randn rand show get reshape transpose pack diff cat stack select; do
  run "tensor $sub --help"  # (tests/cli/help_examples.sh runs every example)
  [[ $rc -eq 0 && "$out" == *$'Examples:\n  tensor '* ]] || fail "tensor $sub --help has no example"
done
version="$(sed -n 's/^project(attnkit VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")"
ok "tensor --version" "attnkit $version"
# every example in the help text runs
tensor randn --shape 2,5,8 --seed 1 >x.json && tensor arange 3 >h.json || fail "help examples"
run "tensor pack x=x.json h0=h.json > inputs.json && tensor get inputs.json#x | tensor diff - x.json -q"
[[ $rc -eq 0 ]] || fail "help example pack/get: $err"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "tensor_tool: all passed"

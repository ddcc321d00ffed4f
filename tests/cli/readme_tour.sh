#!/usr/bin/env bash
# The README's tour runs: every "$ COMMAND" line of the ```sh block under "## A tour" runs (bash, pipefail,
# in order, in one empty folder) and exits 0, and prints the lines shown under it (the same text, or every
# number within 1e-5 relative: the last digits of float32 results move with the processor's GEMM kernel);
# every --heatmap file it names is written; the tour shows every tool. The README's two first commands
# name scripts that exist and are executable (they are run by CI itself: .ci/run).
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$(dirname "$0")/lib/common.sh"
readme="$src/README.md"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

# the same lines, or the same words with every differing word a number within 1e-5 (relative)
numbers_match() {
  awk -v tol=1e-5 '
    function num(s) { return s ~ /^[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?\.?$/ }
    NR == FNR { want[FNR] = $0; n = FNR; next }
    { got[FNR] = $0; m = FNR }
    END {
      if (n != m) exit 1
      for (i = 1; i <= n; i++) {
        if (want[i] == got[i]) continue
        na = split(want[i], a, /[][ ,()=]+/); nb = split(got[i], b, /[][ ,()=]+/)
        if (na != nb) exit 1
        for (j = 1; j <= na; j++)
          if (a[j] != b[j]) {
            if (!num(a[j]) || !num(b[j])) exit 1
            d = a[j] - b[j]; if (d < 0) d = -d; s = a[j] < 0 ? -a[j] : a[j]; if (d > tol * (1 + s)) exit 1
          }
      }
    }' "$1" "$2"
}

commands=0
check() {  # check COMMAND EXPECTED
  local cmd="$1" expected="$2" status=0
  commands=$((commands + 1))
  bash -c "set -o pipefail; $cmd" > out.txt 2> err.txt || status=$?
  if [[ $status != 0 ]]; then
    fail "README tour: \$ $cmd exited $status: $(head -c 400 err.txt)"
    return
  fi
  printf '%s' "$expected" > want.txt
  [[ -n "$expected" ]] && echo >> want.txt
  if ! cmp -s want.txt out.txt && ! numbers_match want.txt out.txt; then
    fail "README tour: \$ $cmd printed something else:"$'\n'"$(diff want.txt out.txt | head -n 20 | sed 's/^/  /')"
  fi
}

# the tour block: the first ```sh block after "## A tour"
block="$(awk '/^## A tour/ { sec = 1; next } sec && /^```sh/ { on = 1; next } on && /^```/ { exit } on { print }' "$readme")"
[[ -n "$block" ]] || { echo "FAIL: no \`\`\`sh block under \"## A tour\" in $readme" >&2; exit 1; }
cmd="" expected="" have=0
while IFS= read -r line; do
  if [[ "$line" == '$ '* ]]; then
    (( have )) && check "$cmd" "$expected"
    cmd="${line:2}" expected="" have=1
  elif (( have )); then
    expected+="${expected:+$'\n'}$line"
  fi
done <<< "$block"
(( have )) && check "$cmd" "$expected"
(( commands >= 8 )) || fail "README tour: only $commands commands"

for f in $(grep -o -- '--heatmap [^ ]*' <<< "$block" | cut -d' ' -f2); do
  grep -q '<svg' "$f" 2> /dev/null || fail "README tour: --heatmap $f was not written"
done
for tool in tensor lstm-run attn-score seq2seq-train transformer-decode compare-arch; do
  grep -qE "(^\\$ |\\| )$tool " <<< "$block" || fail "README tour: $tool is not in the tour"
done

# the two first commands: the first ```sh block of the README
first="$(awk '/^```sh/ { on = 1; next } on && /^```/ { exit } on { print }' "$readme")"
for script in scripts/setup.sh scripts/build.sh examples/walkthrough.sh; do
  grep -qF "$script" <<< "$first" || fail "README: the first commands lack $script"
  [[ -x "$src/$script" ]] || fail "README: $script is not an executable file"
done
grep -qF 'ctest --test-dir build' <<< "$first" || fail "README: the first commands lack the ctest command"
finish "readme_tour ($commands commands)"

#!/usr/bin/env bash
# One naming rule in every format (docs/conventions.md, "Member names"): a result written to .json (nested
# bundles) and to .npz or .safetensors (names joined by '.') compares equal with `tensor diff`, and
# FILE#grad/input and FILE#grad.input name the same member in each.
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$src/tests/cli/lib/common.sh"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"

tensor randn --shape 2,3 --seed 1 > a.json
tensor randn --shape 3 --seed 2 > b.json
tensor pack input=a.json > g.json
tensor pack output=a.json grad=g.json state/h=b.json > r.json
for ext in npz safetensors; do
  tensor get r.json -o "r.$ext" || fail "writing r.$ext"
  tensor diff r.json "r.$ext" -q || fail "r.json and r.$ext differ: $(tensor diff r.json "r.$ext")"
  tensor diff "r.$ext" r.json -q || fail "r.$ext and r.json differ"
  for f in r.json "r.$ext"; do
    for ref in "$f#grad/input" "$f#grad.input"; do
      tensor get "$ref" > got.json && cmp -s got.json a.json || fail "$ref is not grad's input: $(cat got.json err.txt 2>/dev/null)"
    done
    tensor get "$f#state/h[1]" > got.json || fail "$f#state/h[1]"
  done
done
# a real member that differs is still found, named as the file names it
tensor randn --shape 2,3 --seed 9 > c.json
tensor pack input=c.json > g2.json
tensor pack output=a.json grad=g2.json state/h=b.json > r2.json
tensor get r2.json -o r2.npz
status=0; tensor diff r.json r2.npz -q || status=$?
[[ $status == 1 ]] || fail "r.json and r2.npz (another grad.input) compare with status $status, expected 1"
finish names_across_formats

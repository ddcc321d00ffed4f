#!/usr/bin/env bash
# Usage errors exit 2 in every tool (docs/hardening.md, "Command lines"): a negative seed is refused, never
# wrapped round to 2^64 - 1; an infinite rate is refused as a usage error; a message names its option once.
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$src/tests/cli/lib/common.sh"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"

seq2seq-train --task reverse --vocab-size 6 --min-len 2 --max-len 5 --train-size 16 --valid-size 4 --model lstm \
  --attention dot --hidden 8 --embed 4 --batch 8 --steps 2 --threads 1 --save m.json > /dev/null || fail "seq2seq-train exited $?"
train=(seq2seq-train --task copy --model lstm --steps 1 --save o.json --train-size 8 --valid-size 2 --batch 4 --hidden 4 --embed 4)

expect_error 2 "--seed: -1 is negative, expected a number >= 0" "${train[@]}" --seed -1
expect_error 2 "--seed: -1 is negative, expected a number >= 0" transformer-decode m.json --src '1 2' --strategy sample --seed -1
expect_error 2 "--seed: -1 is negative, expected a number >= 0" compare-arch --seed -1
expect_error 2 "--lr: inf is not finite, expected a number >= 0" "${train[@]}" --lr inf
expect_error 2 "--min-len 10 is more than --max-len 4" transformer-decode m.json --src '1 2' --min-len 10 --max-len 4
expect_error 2 "--temperature: -1 is not a number > 0 and < 1e30" transformer-decode m.json --src '1 2' --strategy sample --temperature -1
grep -q -- "--temperature: --temperature" err.txt && fail "the option is named twice: $(cat err.txt)"
expect_error 2 "--top-p: 2 is not in (0, 1]" transformer-decode m.json --src '1 2' --strategy sample --top-p 2
grep -q -- "--top-p: --top-p" err.txt && fail "the option is named twice: $(cat err.txt)"
[[ ! -e o.json ]] || fail "a refused run wrote o.json"

finish usage_bounds

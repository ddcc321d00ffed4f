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
# Sizes written as 1e9 are whole numbers: bounded, never "Could not convert"; a fraction or a number past
# what the option holds is said with the bound.
expect_error 2 "--epochs 1000000000000: 2 batches an epoch make more than 1099511627776 steps; at most 549755813888 epochs" \
  seq2seq-train --task copy --model lstm --save o.json --train-size 8 --valid-size 2 --batch 4 --hidden 4 --embed 4 --epochs 1e12
expect_error 2 "--epochs: 1e30 is out of range, expected 1 to 1099511627776" seq2seq-train --task copy --model lstm --save o.json --epochs 1e30
expect_error 2 "--steps: 2.5 is not a whole number, expected 0 to 1099511627776" seq2seq-train --task copy --model lstm --save o.json --steps 2.5
expect_error 2 "from --hidden 1000000000" seq2seq-train --task copy --model lstm --save o.json --hidden 1e9
expect_error 2 "--seed: 1e30 is more than 18446744073709551615, the largest --seed holds" "${train[@]}" --seed 1e30
expect_error 2 "--hidden: 2.5 is not a whole number" seq2seq-train --task copy --model lstm --save o.json --hidden 2.5
expect_error 1 "weight_ih_l0 [4000000000, 4] has 16000000000 elements" sh -c 'tensor randn --shape 1x2x4 | lstm-run - --init --input-size 4 --hidden-size 1e9'
expect_error 2 "--max-len 1000000000 is more than the maximum 4096" transformer-decode m.json --src '1 2' --max-len 1e9
expect_error 2 "--n: 2.5 is not a whole number, expected 1 to 1099511627776" compare-arch --n 2.5
expect_error 2 "--n: 1e13 is out of range, expected 1 to 1099511627776" compare-arch --n 1e13
grep -q "Could not convert" err.txt && fail "CLI11's message leaked: $(cat err.txt)"
[[ ! -e o.json ]] || fail "a refused run wrote o.json"

finish usage_bounds

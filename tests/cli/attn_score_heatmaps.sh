#!/usr/bin/env bash
# attn-score --heatmap on a stream of records (docs/attn-score.md, "Heatmap"): {n} in the name writes one
# picture per record (1, 2, ...); without it a second record is refused (exit 2), never drawn over the first.
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$src/tests/cli/lib/common.sh"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"

tensor randn --shape 4,3 --seed 1 > k.json
{ tensor randn --shape 2,3 --seed 2; tensor randn --shape 2,3 --seed 3; tensor randn --shape 2,3 --seed 4; } > q.ndjson
attn-score --query q.ndjson --keys k.json --score dot --heatmap 'w{n}.svg' > out.ndjson || fail "{n} heatmaps exited $?"
[[ $(wc -l < out.ndjson) == 3 ]] || fail "expected 3 results: $(cat out.ndjson)"
for n in 1 2 3; do
  [[ -s "w$n.svg" ]] || fail "no heatmap w$n.svg for record $n"
done
# each picture is its own record's: record 2's alone gives the same file
sed -n 2p q.ndjson > q2.json
attn-score --query q2.json --keys k.json --score dot --heatmap one.svg > /dev/null || fail "one record exited $?"
cmp -s one.svg w2.svg || fail "w2.svg is not record 2's heatmap"
cmp -s w1.svg w2.svg && fail "records 1 and 2 drew the same heatmap"
# as any error in a stream's record, the results before it stay written (one line: record 1's)
status=0
attn-score --query q.ndjson --keys k.json --score dot --heatmap w.svg > w_out.ndjson 2> err.txt || status=$?
[[ $status == 2 ]] || fail "a second record with --heatmap w.svg exited $status, expected 2"
grep -qF -- "--heatmap w.svg has no {n} in its name, so it takes one record; got a second" err.txt ||
  fail "no reason for refusing the second record: $(cat err.txt)"
[[ $(wc -l < w_out.ndjson) == 1 ]] && cmp -s w.svg w1.svg || fail "w.svg is not record 1's heatmap, alone"
finish attn_score_heatmaps

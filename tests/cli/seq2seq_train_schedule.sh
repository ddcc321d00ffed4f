#!/usr/bin/env bash
# seq2seq-train's learning rate: --lr is the peak rate under every schedule (noam included: the rate at step
# --warmup), so a Transformer under noam learns with the default --lr; a peak below 1e-5 is warned about.
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

copy=(--task copy --vocab-size 6 --min-len 2 --max-len 5 --train-size 200 --valid-size 0 --model transformer
      --layers 2 --d-model 16 --heads 2 --ff 32 --batch 16 --threads 1 --log-every 10)
seq2seq-train "${copy[@]}" --schedule noam --warmup 20 --steps 100 --save t.json --metrics t.jsonl > /dev/null 2> err.txt ||
  fail "noam run exited $?: $(cat err.txt)"
python3 - <<'PY' || fail "noam with the default --lr: $(cut -c1-120 t.jsonl)"
import json
lines = [json.loads(l) for l in open("t.jsonl")]
lr = {l["step"]: l["lr"] for l in lines}
assert abs(lr[20] - 1e-3) <= 1e-15, lr[20]          # the peak, at step W, is --lr (0.001 by default)
assert all(v <= 1e-3 + 1e-15 for v in lr.values()), lr
assert abs(lr[10] - 0.5e-3) <= 1e-15, lr[10]        # linear up to W
assert abs(lr[80] - 0.5e-3) <= 1e-15, lr[80]        # then sqrt(W / s): at s = 4 W, half the peak
assert lines[-1]["loss"] < 0.7 * lines[0]["loss"], [l["loss"] for l in lines]
PY
[[ ! -s err.txt ]] || fail "a run at the default --lr warned: $(cat err.txt)"
# a peak rate below 1e-5 learns next to nothing: said on stderr (the run still goes)
seq2seq-train "${copy[@]}" --lr 1e-6 --steps 2 --save low.json > /dev/null 2> err.txt || fail "--lr 1e-6 exited $?"
grep -q "warning: the peak learning rate --lr 1e-06 is below 1e-05" err.txt || fail "no low-rate warning: $(cat err.txt)"

finish seq2seq_train_schedule

#!/usr/bin/env bash
# Checkpoint averaging: --keep-last keeps the newest N numbered saves of a run; --average writes their parameter
# mean (checked against a mean computed here), which decoding reads and training refuses to resume; checkpoints
# of another model and misused options are refused.
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

train() { seq2seq-train --task reverse --vocab-size 6 --min-len 2 --max-len 5 --train-size 64 --valid-size 8 \
  --batch 16 --lr 0.02 --threads 1 --log-every 100 "$@" > /dev/null; }
train --model lstm --attention dot --hidden 16 --embed 8 --steps 25 --save-every 5 --keep-last 3 --save m.json \
  || fail "seq2seq-train --keep-last exited $?"
[[ "$(ls m.step*.json | sort | tr '\n' ' ')" == "m.step15.json m.step20.json m.step25.json " ]] \
  || fail "--keep-last 3 kept: $(ls m.step*.json | tr '\n' ' ')"
tensor diff m.step25.json#decoder m.json#decoder --rtol 0 --atol 0 -q || fail "the last snapshot is not the checkpoint"
cmp -s m.step25.json m.json || fail "the last snapshot's bytes are not the checkpoint's"
seq2seq-train --average m.step15.json m.step20.json m.step25.json --save avg.json > summary.json \
  || fail "--average exited $?"
python3 - <<'PY' || fail "the average: $(cat summary.json)"
import json
s = json.load(open("summary.json"))
assert s == {"averaged": 3, "checkpoint": "avg.json", "steps": [15, 20, 25]}, s
ins = [json.load(open(f"m.step{k}.json")) for k in (15, 20, 25)]
avg = json.load(open("avg.json"))
assert "optimizer" not in avg and "step" not in avg and avg["averaged"] == {"checkpoints": "3", "steps": "15 20 25"}
def walk(a, xs, path):
    if isinstance(a, dict):
        for k in a: walk(a[k], [x[k] for x in xs], path + "/" + k)
    elif isinstance(a, list):
        assert len(a) == len(xs[0]), path
        for i, v in enumerate(a): walk(v, [x[i] for x in xs], path)
    elif isinstance(a, float):
        mean = sum(xs) / 3
        assert abs(a - mean) <= 1e-6 * max(1.0, abs(mean)), (path, a, mean)
        walk.n += 1
walk.n = 0
for part in ("src_embed", "tgt_embed", "encoder", "decoder", "attention", "output"):
    if part in avg: walk(avg[part], [x[part] for x in ins], part)
assert walk.n > 500, walk.n
PY
printf '1 2 3\n' | transformer-decode avg.json --threads 1 > out.jsonl || fail "transformer-decode of the average exited $?"
grep -q '"tokens"' out.jsonl || fail "transformer-decode of the average: $(cat out.jsonl)"
expect_error 1 "an average of 3 checkpoints (steps 15 20 25) holds no training state" \
  seq2seq-train --resume avg.json --steps 30 --save again.json
train --model lstm --attention dot --hidden 12 --embed 8 --steps 5 --save other.json || fail "other model exited $?"
expect_error 1 'other.json: config hidden is "12", but m.step15.json'"'"'s is "16"' \
  seq2seq-train --average m.step15.json other.json --save bad.json
[[ ! -e bad.json ]] || fail "a refused average left bad.json"
expect_error 2 "--average needs two or more checkpoints" seq2seq-train --average m.json --save one.json
expect_error 2 "--lr does nothing with --average" seq2seq-train --average m.json m.step20.json --lr 1 --save x.json
expect_error 2 "--keep-last N keeps the saves of --save-every" \
  seq2seq-train --task copy --model lstm --steps 2 --keep-last 2 --save k.json
finish checkpoint_average

#!/usr/bin/env bash
# seq2seq-train --resume restores the training configuration the checkpoint was saved with (data source,
# optimizer, rate, schedule, clip, label smoothing, dropout, batch, maxi-batch, seed): --resume and --steps alone continue
# the run bit for bit; an option given again with another value is refused unless --override.
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

c=(--task reverse --vocab-size 7 --min-len 2 --max-len 6 --train-size 80 --valid-size 10 --model gru --attention dot
   --hidden 12 --embed 6 --batch 8 --lr 0.01 --optimizer adamw --warmup 3 --clip 0.5 --label-smoothing 0.1
   --dropout 0.1 --maxi-batch 4 --seed 5 --threads 1 --log-every 5)
seq2seq-train "${c[@]}" --steps 20 --save u.json > /dev/null || fail "uninterrupted run exited $?"
seq2seq-train "${c[@]}" --steps 10 --save h.json > /dev/null || fail "first half exited $?"
seq2seq-train --resume h.json --steps 20 --save r.json > /dev/null 2> err.txt || fail "--resume alone exited $?: $(cat err.txt)"
python3 - <<'PY' || fail "a run resumed with --resume and --steps alone differs from the uninterrupted one"
import json
u = json.load(open("u.json")); r = json.load(open("r.json"))
for k in u:
    if k != "window":  # the metrics window of the last logging period, not the model
        assert u[k] == r[k], k
PY
python3 -c 'import json, sys; t = json.load(open("h.json"))["training"]; sys.exit(not (t["options"]["--maxi-batch"] == "4" and t["maxi_batch"] == "4"))' ||
  fail "h.json does not hold --maxi-batch 4"
# an option given again must agree with the checkpoint, unless --override
expect_error 2 "--maxi-batch 0: the checkpoint h.json was trained with --maxi-batch 4" \
  seq2seq-train --resume h.json --steps 20 --maxi-batch 0 --save x.json
expect_error 2 "--lr 0.02: the checkpoint h.json was trained with --lr 0.01; give --override to change it" \
  seq2seq-train --resume h.json --steps 20 --lr 0.02 --save x.json
expect_error 2 "--task copy: the checkpoint h.json was trained with --task reverse" \
  seq2seq-train --resume h.json --steps 20 --task copy --save x.json
[[ ! -e x.json ]] || fail "a refused option left a checkpoint"
seq2seq-train --resume h.json --steps 20 --lr 0.02 --override --save o.json > /dev/null 2> err.txt || fail "--override exited $?"
grep -q "^seq2seq-train: --lr 0.02 replaces the checkpoint's --lr 0.01 (--override)$" err.txt ||
  fail "--override changed --lr without a word: $(cat err.txt)"
seq2seq-train "${c[@]}" --resume h.json --steps 20 --save same.json > /dev/null || fail "the same options given again exited $?"
# the same number written another way is the same option
seq2seq-train --resume h.json --steps 20 --lr 0.010 --clip 5e-1 --save same2.json > /dev/null 2> err.txt ||
  fail "--lr 0.010 for a checkpoint of --lr 0.01 was refused: $(cat err.txt)"
# a checkpoint saved without its options resumes as before (the command line gives them), with a note
python3 - <<'PY'
import json
h = json.load(open("h.json")); del h["training"]["options"]; json.dump(h, open("old.json", "w"))
PY
seq2seq-train "${c[@]}" --resume old.json --steps 20 --save o2.json > /dev/null 2> err.txt || fail "an old checkpoint exited $?"
grep -q "old.json: saved without its training options" err.txt || fail "no note for an old checkpoint: $(cat err.txt)"
expect_error 2 "give --task NAME or --train FILE" seq2seq-train --resume old.json --steps 20 --save o3.json

finish seq2seq_train_resume

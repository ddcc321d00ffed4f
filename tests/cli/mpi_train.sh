#!/usr/bin/env bash
# Data-parallel training (docs/distributed.md): mpirun -n 2 with --deterministic-reduce gives the same bits as
# one process cutting its batch into the same 2 shards (metrics and checkpoint), on the copy task with an LSTM
# and attention and on the reverse task with a Transformer (dropout on: each shard's own stream); the fast
# allreduce stays within float rounding of one plain process; a checkpoint of 2 processes resumes on 1 (and
# one of 1 process on 2); a global batch the processes do not divide is refused.
set -euo pipefail
source "$ATTNKIT_SOURCE/tests/cli/lib/mpi.sh"  # skips without MPI; mpi K CMD...
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

# same_run A B: the metrics files A.jsonl, B.jsonl agree but for the speed, and the checkpoints A.json, B.json
# agree member by member (the metrics window aside when $3 is "resumed").
same_run() {
  python3 - "$1" "$2" "${3:-}" <<'PY' || fail "$1 and $2 differ"
import json, sys
a, b, resumed = sys.argv[1:]
def lines(name):
    out = [json.loads(l) for l in open(name + ".jsonl")]
    for l in out: l.pop("tokens_per_s")
    return out
if not resumed:
    assert lines(a) == lines(b), (lines(a), lines(b))
ca, cb = json.load(open(a + ".json")), json.load(open(b + ".json"))
for k in ca:
    if not (resumed and k == "window"):
        assert ca[k] == cb[k], k
assert set(ca) == set(cb)
PY
}

lstm=(--task copy --vocab-size 7 --min-len 2 --max-len 6 --train-size 64 --valid-size 8 --model lstm --attention dot
      --hidden 12 --embed 6 --batch 8 --lr 0.01 --dropout 0.1 --seed 5 --threads 1 --log-every 5)
mpi 2 seq2seq-train "${lstm[@]}" --steps 20 --deterministic-reduce --save l2.json --metrics l2.jsonl > out.txt \
  || fail "lstm on 2 processes exited $?"
seq2seq-train "${lstm[@]}" --steps 20 --grad-shards 2 --deterministic-reduce --save l1.json --metrics l1.jsonl > /dev/null \
  || fail "lstm on 1 process with 2 shards exited $?"
[[ $(wc -l < out.txt) == 1 ]] || fail "2 processes printed $(wc -l < out.txt) summaries (rank 0 prints one)"
cmp -s l1.json l2.json || fail "lstm: the checkpoint of 2 processes differs from that of 1 process with 2 shards"
same_run l1 l2
grep -q '"grad_shards"' l2.json || fail "the checkpoint does not record its gradient shards"
grep -q '"shard_rngs"' l2.json || fail "the checkpoint does not hold shard 1's dropout stream"

transformer=(--task reverse --vocab-size 7 --min-len 2 --max-len 6 --train-size 64 --valid-size 8 --model transformer
             --layers 1 --d-model 16 --heads 2 --ff 32 --batch 8 --lr 0.005 --seed 3 --threads 1 --log-every 5)
mpi 2 seq2seq-train "${transformer[@]}" --steps 15 --deterministic-reduce --save t2.json --metrics t2.jsonl \
  > /dev/null || fail "transformer on 2 processes exited $?"
seq2seq-train "${transformer[@]}" --steps 15 --grad-shards 2 --deterministic-reduce --save t1.json --metrics t1.jsonl > /dev/null \
  || fail "transformer on 1 process with 2 shards exited $?"
cmp -s t1.json t2.json || fail "transformer: the checkpoint of 2 processes differs from 1 process with 2 shards"
same_run t1 t2

# the fast allreduce against one plain process (no shards): the same curve within float rounding
nodrop=(--task copy --vocab-size 7 --min-len 2 --max-len 6 --train-size 64 --valid-size 8 --model lstm
        --attention dot --hidden 12 --embed 6 --lr 0.01 --seed 5 --threads 1 --log-every 5 --steps 20)
mpi 2 seq2seq-train "${nodrop[@]}" --batch 8 --save f2.json --metrics f2.jsonl > /dev/null || fail "fast allreduce exited $?"
seq2seq-train "${nodrop[@]}" --batch 8 --save f1.json --metrics f1.jsonl > /dev/null || fail "one plain process exited $?"
python3 - <<'PY' || fail "the fast allreduce's curve is not within 1e-4 of one process's"
import json
a = [json.loads(l) for l in open("f1.jsonl")]
b = [json.loads(l) for l in open("f2.jsonl")]
assert len(a) == len(b) == 4
for x, y in zip(a, b):
    for k in ("loss", "valid_loss", "grad_norm"):
        assert abs(x[k] - y[k]) <= 1e-4 * abs(x[k]), (k, x[k], y[k])
PY

# resume with another process count: 2 processes for 10 steps, then 1 process (the checkpoint's 2 shards) to 20
mpi 2 seq2seq-train "${lstm[@]}" --steps 10 --deterministic-reduce --save h.json > /dev/null \
  || fail "first half on 2 processes exited $?"
seq2seq-train --resume h.json --steps 20 --save r.json --metrics r.jsonl > /dev/null 2> err.txt \
  || fail "resume on 1 process exited $?: $(cat err.txt)"
same_run l2 r resumed
# resumed on 2 processes, the checkpoint's --deterministic-reduce comes back with the other options
mpi 2 seq2seq-train --resume h.json --steps 20 --save r2.json --metrics r2.jsonl > /dev/null 2> err.txt \
  || fail "resume on 2 processes exited $?: $(cat err.txt)"
same_run l2 r2 resumed
# a single-process checkpoint (1 shard) goes on over 2 processes, saying that the shards changed
seq2seq-train "${lstm[@]}" --steps 10 --save s.json > /dev/null || fail "single-process half exited $?"
mpi 2 seq2seq-train --resume s.json --steps 20 --save s2.json > /dev/null 2> err.txt \
  || fail "resume on 2 processes exited $?: $(cat err.txt)"
grep -q "s.json cut each batch into 1 gradient shard(s); this run cuts it into 2" err.txt \
  || fail "no note that the shards changed: $(cat err.txt)"

expect_error 2 "--batch 9 (the global batch) is not a multiple of the 2 gradient shards" \
  mpi 2 seq2seq-train "${nodrop[@]}" --batch 9 --save x.json
expect_error 2 "--grad-shards 3 is not a multiple of the 2 processes" \
  mpi 2 seq2seq-train "${nodrop[@]}" --batch 6 --grad-shards 3 --save x.json
expect_error 2 "--batch 10 (the global batch) is not a multiple of the 3 gradient shards" \
  seq2seq-train "${nodrop[@]}" --batch 10 --grad-shards 3 --save x.json
printf 'the cat sat on the mat and the dog sat on the log.\n%.0s' 1 2 3 4 > lm.txt
expect_error 2 "--model transformer-lm trains in one process: data parallelism (mpirun -n 2" \
  mpi 2 seq2seq-train --model transformer-lm --train lm.txt --context 8 --layers 1 --d-model 16 --heads 2 --ff 32 \
  --steps 2 --save x.json
expect_error 2 "--model lstm-lm trains in one process" \
  seq2seq-train --model lstm-lm --train lm.txt --context 8 --hidden 16 --grad-shards 2 --steps 2 --save x.json
[[ ! -e x.json ]] || fail "a refused run left a checkpoint"

finish mpi_train

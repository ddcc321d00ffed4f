#!/usr/bin/env bash
# Each process reads only its shards' parts of the training file (docs/distributed.md, "Data"): mpirun -n 2
# --deterministic-reduce gives the same parameters, bit for bit, as one process with --grad-shards 2 (and 2
# processes with 4 shards as one with 4); each process says which bytes it reads; a run resumed with another
# process count equals the uninterrupted one; a bad line in the second half of the file stops every process
# with the message naming the line's byte, exit 1 (and with --skip-bad-lines is skipped and reported once).
set -euo pipefail
source "$ATTNKIT_SOURCE/tests/cli/lib/mpi.sh"  # skips without MPI; mpi K CMD...
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

# 150 words and their reversals, of 2 to 7 letters: 1,319 bytes
python3 - <<'PY'
import random
r = random.Random(3)
with open("pairs.tsv", "w") as f:
    for _ in range(150):
        w = "".join(r.choice("abcdefg") for _ in range(r.randint(2, 7)))
        f.write(w + "\t" + w[::-1] + "\n")
PY
size=$(wc -c < pairs.tsv)

# same_params A B: every parameter of checkpoints A and B equal, bit for bit
same_params() {
  local m
  for m in src_embed encoder tgt_embed decoder combine output; do
    tensor diff -q "$1#$m" "$2#$m" --rtol 0 --atol 0 || fail "$1 and $2 differ in $m"
  done
}
# same_metrics A B: the metrics files agree but for the speed
same_metrics() {
  python3 - "$1" "$2" <<'PY' || fail "the metrics $1 and $2 differ"
import json, sys
a, b = ([{k: v for k, v in json.loads(l).items() if k != "tokens_per_s"} for l in open(n)] for n in sys.argv[1:])
assert a == b and a, (a, b)
PY
}

c=(--train pairs.tsv --model lstm --attention dot --hidden 12 --embed 6 --batch 8 --lr 0.01 --dropout 0.1 --seed 5
   --threads 1 --log-every 5)
mpi 2 seq2seq-train "${c[@]}" --steps 20 --deterministic-reduce --save p2.json --metrics p2.jsonl > out.txt 2> err.txt \
  || fail "2 processes exited $?: $(cat err.txt)"
[[ $(wc -l < out.txt) == 1 ]] || fail "2 processes printed $(wc -l < out.txt) summaries"
half=$((size / 2))
grep -qx "seq2seq-train: rank 0: reads bytes 0..$((half - 1)) of pairs.tsv (shard 0)" err.txt \
  || fail "rank 0 does not say which bytes it reads: $(cat err.txt)"
grep -qx "seq2seq-train: rank 1: reads bytes $half..$((size - 1)) of pairs.tsv (shard 1)" err.txt \
  || fail "rank 1 does not say which bytes it reads: $(cat err.txt)"
seq2seq-train "${c[@]}" --steps 20 --grad-shards 2 --save p1.json --metrics p1.jsonl > /dev/null 2> err.txt \
  || fail "1 process with 2 shards exited $?"
grep -qx "seq2seq-train: rank 0: reads bytes 0..$((size - 1)) of pairs.tsv (shards 0, 1)" err.txt \
  || fail "one process does not say it reads both parts: $(cat err.txt)"
same_params p1.json p2.json
same_metrics p1.jsonl p2.jsonl
grep -q '"shard_data_orders"' p2.json || fail "the checkpoint lacks shard 1's data order"
# one process without shards reads the whole file as it always did, and says nothing about parts
seq2seq-train "${c[@]}" --steps 2 --save plain.json > /dev/null 2> err.txt || fail "one plain process exited $?"
[[ ! -s err.txt ]] || fail "one plain process spoke on stderr: $(cat err.txt)"

# 2 processes of 2 shards each equal one process of 4 shards
mpi 2 seq2seq-train "${c[@]}" --steps 20 --grad-shards 4 --deterministic-reduce --save q2.json > /dev/null 2> err.txt \
  || fail "2 processes with 4 shards exited $?: $(cat err.txt)"
grep -q "rank 1: reads bytes $((size / 2))\.\.$((size - 1)) of pairs.tsv (shards 2, 3)" err.txt \
  || fail "rank 1 of 4 shards: $(cat err.txt)"
seq2seq-train "${c[@]}" --steps 20 --grad-shards 4 --save q1.json > /dev/null 2>&1 || fail "1 process, 4 shards: $?"
same_params q1.json q2.json

# resume with another process count: 2 processes to step 10, then 1 to 20 = the 20 steps of 2 processes;
# 1 process of 4 shards to step 10, then 2 processes to 20 = the 20 steps of 1 process with 4 shards
mpi 2 seq2seq-train "${c[@]}" --steps 10 --deterministic-reduce --save h.json > /dev/null 2>&1 || fail "first half: $?"
seq2seq-train --resume h.json --steps 20 --save r.json > /dev/null 2> err.txt || fail "resume on 1: $(cat err.txt)"
same_params p2.json r.json
seq2seq-train "${c[@]}" --steps 10 --grad-shards 4 --deterministic-reduce --save h4.json > /dev/null 2>&1 || fail "first half, 4 shards: $?"
mpi 2 seq2seq-train --resume h4.json --steps 20 --save r4.json > /dev/null 2> err.txt || fail "resume on 2: $(cat err.txt)"
same_params q1.json r4.json

# a bad line in the second half: rank 1 finds it, every process stops with its message, exit 1, no checkpoint
head -n 90 pairs.tsv > bad.tsv
at=$(wc -c < bad.tsv)
printf 'no tab here\n' >> bad.tsv
tail -n 60 pairs.tsv >> bad.tsv
(( at > $(wc -c < bad.tsv) / 2 )) || fail "the bad line is not in the second half"
expect_error 1 "seq2seq-train: bad.tsv: the line at byte $at: no tab between source and target" \
  mpi 2 seq2seq-train "${c[@]/pairs.tsv/bad.tsv}" --steps 5 --save x.json
expect_error 1 "seq2seq-train: bad.tsv: the line at byte $at: no tab between source and target" \
  seq2seq-train "${c[@]/pairs.tsv/bad.tsv}" --steps 5 --grad-shards 2 --save x.json
[[ ! -e x.json ]] || fail "bad input left a checkpoint"
# with --skip-bad-lines the process whose part holds it skips it and says so
mpi 2 seq2seq-train "${c[@]/pairs.tsv/bad.tsv}" --skip-bad-lines --steps 2 --save s.json > /dev/null 2> err.txt \
  || fail "--skip-bad-lines on 2 processes exited $?: $(cat err.txt)"
[[ $(grep -c "^seq2seq-train: bad.tsv: skipped 1 bad line; bad.tsv: the line at byte $at: no tab" err.txt) == 1 ]] \
  || fail "the skipped line is not reported once: $(cat err.txt)"

finish mpi_shard

#!/usr/bin/env bash
# Faults under mpirun -n 2 (docs/distributed.md): a process killed with SIGKILL ends the job promptly with a
# non-zero status and the last checkpoint intact (it resumes); SIGINT to mpirun stops every process at the
# same step, rank 0 saves once; bad input stops every process with the message, exit 1, no hang.
set -euo pipefail
source "$ATTNKIT_SOURCE/tests/cli/lib/mpi.sh"  # skips without MPI; mpi K CMD...
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

c=(--task copy --vocab-size 7 --min-len 2 --max-len 6 --train-size 64 --valid-size 8 --model lstm --attention dot
   --hidden 12 --embed 6 --batch 8 --lr 0.01 --seed 5 --threads 1 --log-every 1000 --steps 100000000
   --save-every 10)
# wait_for FILE: until FILE exists (at most 30 s)
wait_for() { for _ in $(seq 300); do [[ -e "$1" ]] && return 0; sleep 0.1; done; fail "no $1 after 30 s"; }

# SIGKILL one process after the first checkpoint: mpirun ends the other one (timeout's 124 would be a hang)
status=0
mpi 2 seq2seq-train "${c[@]}" --save "$work/killed.json" > /dev/null 2> err.txt & job=$!
wait_for killed.json
victim=$(pgrep -f -- "^[^ ]*seq2seq-train .*--save $work/killed.json" | tail -1)  # a process, not mpirun
kill -9 "$victim" || fail "no process to kill"
wait "$job" || status=$?
[[ $status != 0 && $status != 124 ]] || fail "a killed process: mpirun exited $status (124: a hang)"
seq2seq-train --resume killed.json --steps "$(python3 -c 'import json; print(int(json.load(open("killed.json"))["step"]) + 2)')" \
  --save after.json > /dev/null 2> err.txt || fail "the checkpoint left by a killed job does not resume: $(cat err.txt)"

# SIGINT to mpirun: every process stops after the same step and rank 0 saves once (Open MPI's mpirun passes
# it on as SIGTERM and exits 1; the processes exit 128 + the signal)
status=0
mpi 2 seq2seq-train "${c[@]}" --save "$work/int.json" > out.txt 2> err.txt & job=$!
wait_for int.json
pkill -INT -f -- "^mpirun.*--save $work/int.json" || pkill -INT -f -- "mpiexec.*--save $work/int.json"
wait "$job" || status=$?
[[ $status != 0 && $status != 124 ]] || fail "SIGINT to mpirun: exited $status"
[[ $(grep -c "stopped after step" err.txt) == 1 ]] || fail "SIGINT: not one stop message: $(cat err.txt)"
step=$(sed -n 's/.*stopped after step \([0-9]*\);.*/\1/p' err.txt)
[[ $(python3 -c 'import json; print(json.load(open("int.json"))["step"])') == "$step" ]] \
  || fail "SIGINT: the checkpoint is not at the step the message names ($step)"
[[ ! -s out.txt ]] || fail "SIGINT: a summary on stdout"

# bad input: every process stops with the message
printf 'abc\tabc\nxyz\n' > bad.tsv
expect_error 1 "bad.tsv:2: no tab between source and target" \
  mpi 2 seq2seq-train --train bad.tsv --model lstm --batch 2 --steps 5 --save x.json
[[ ! -e x.json ]] || fail "bad input left a checkpoint"

finish mpi_faults

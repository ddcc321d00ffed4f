#!/usr/bin/env bash
# seq2seq-train's files and streams: a summary that cannot be written fails (exit 1), destinations are
# checked before step 1, a fresh run starts a new metrics history, --plot refuses a torn metrics file.
set -euo pipefail
work="$(mktemp -d)"; trap 'chmod -R u+w "$work"; rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

tiny=(--task reverse --vocab-size 5 --min-len 2 --max-len 4 --train-size 32 --valid-size 8 --model gru
      --hidden 8 --embed 4 --batch 8 --threads 1 --log-every 2)

# --- standard output that cannot be written: exit 1, as every tool does
expect_error 1 "standard output: write error" bash -c "seq2seq-train ${tiny[*]} --steps 2 --save a.json > /dev/full"
expect_error 1 "standard output: write error" bash -c "seq2seq-train ${tiny[*]} --steps 2 --save b.json >&-"

# --- destinations are checked before step 1: a missing folder is refused at once, naming the option, and no
#     checkpoint is written (a run of 100000 steps would take minutes: refused in a moment instead)
long=("${tiny[@]}" --steps 20000)
expect_error 1 "--save nodir/m.json: nodir/m.json: cannot create a temporary file in nodir/" seq2seq-train "${long[@]}" --save nodir/m.json
expect_error 1 "--metrics nodir/m.jsonl" seq2seq-train "${long[@]}" --save c.json --metrics nodir/m.jsonl
expect_error 1 "--plot nodir/p.svg" seq2seq-train "${long[@]}" --save c.json --plot nodir/p.svg
mkdir adir
expect_error 1 "--metrics adir: adir: is a folder, not a file" seq2seq-train "${long[@]}" --save c.json --metrics adir
[[ ! -e c.json ]] || fail "a refused destination left a checkpoint"
[[ -z "$(ls -A adir)" ]] || fail "a refused destination left files: $(ls -A adir)"

# --- nothing to train: --steps is the total counted from the start of the run, so a resume at or below the
#     checkpoint's step, or --steps 0, says on stderr that nothing was trained (exit 0), and its summary has
#     no train_loss (the checkpoint and the evaluation are there as after any run)
seq2seq-train "${tiny[@]}" --steps 4 --save d.json > /dev/null || fail "4 steps exited $?"
for n in 4 3; do
  seq2seq-train "${tiny[@]}" --steps $n --resume d.json --save d2.json > sum.json 2> err.txt || fail "--steps $n exited $?"
  grep -qF "nothing trained: the checkpoint d.json is at step 4 and --steps $n is the total counted from the start of the run" err.txt ||
    fail "--steps $n at step 4: $(cat err.txt)"
  grep -q train_loss sum.json && fail "--steps $n at step 4: a train_loss: $(cat sum.json)"
done
seq2seq-train "${tiny[@]}" --steps 0 --save z.json > sum.json 2> err.txt || fail "--steps 0 exited $?"
grep -qF -- "--steps 0: nothing trained" err.txt || fail "--steps 0: $(cat err.txt)"
grep -q train_loss sum.json && fail "--steps 0: a train_loss: $(cat sum.json)"

# --- a fresh run with an existing --metrics file starts a new history (said on stderr); --resume appends
printf '{"step":500,"loss":9}\n' > h.jsonl
seq2seq-train "${tiny[@]}" --steps 4 --save h.json --metrics h.jsonl > /dev/null 2> err.txt || fail "fresh run exited $?"
grep -q -- "--metrics h.jsonl: emptied: a fresh run starts a new history" err.txt || fail "no new-history note: $(cat err.txt)"
[[ "$(grep -c '"step":' h.jsonl)" == 2 ]] && ! grep -q '"step":500' h.jsonl || fail "the old history stayed: $(cat h.jsonl)"
seq2seq-train "${tiny[@]}" --steps 6 --resume h.json --save h.json --metrics h.jsonl --plot h.svg > /dev/null 2> err.txt ||
  fail "resume exited $?"
[[ "$(grep -c '"step":' h.jsonl)" == 3 ]] || fail "--resume did not append: $(cat h.jsonl)"
grep -q "emptied" err.txt && fail "a resumed run emptied its metrics"
# --plot refuses a torn metrics file (a last line without its newline), naming it; no plot is left
printf '{"step":8,"loss":1' >> h.jsonl
expect_error 1 "--plot: h.jsonl: line 4 " \
  seq2seq-train "${tiny[@]}" --steps 8 --resume h.json --save h2.json --metrics h.jsonl --plot t.svg
[[ ! -e t.svg ]] || fail "a refused --plot left t.svg"
# a metrics line that cannot be written whole is not written at all (a full disk: /dev/full as the file)
if [[ -w /dev/full ]]; then
  expect_error 1 "/dev/full: write failed" seq2seq-train "${tiny[@]}" --steps 2 --save f.json --metrics /dev/full
fi

# --- validation tokens missing from the training data's vocabulary are reported (count and examples)
printf 'abc\tcba\nab\tba\n' > tr.tsv
printf 'abz\tzba\nxy\tyx\n' > va.tsv
seq2seq-train --train tr.tsv --valid va.tsv --model gru --hidden 4 --embed 4 --steps 1 --threads 1 --save v.json \
  > /dev/null 2> err.txt || fail "unknown validation tokens exited $?"
grep -qF 'va.tsv: 6 tokens are not in the training data'"'"'s vocabulary (read as <unk>), e.g. "z" (source), "z" (target), "x" (source), "y" (source), "y" (target)' err.txt ||
  fail "unknown validation tokens not reported: $(cat err.txt)"

finish seq2seq_train_io

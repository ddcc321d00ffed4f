#!/usr/bin/env bash
# seq2seq-train's operational side: --epochs, --save-every, --plot, the progress bar (a terminal only),
# SIGINT / SIGTERM (finish the step, save, exit 130 / 143) and an exact resume from the interrupted
# checkpoint, a non-finite loss (exit 1 naming the step, the last good checkpoint kept), SIGKILL at varied
# moments of a run saving every step (the checkpoint on disk always complete and resumable), --vocab FILE,
# and bad input (exit 1 naming the file and the reason, the checkpoint left as it was).
set -euo pipefail
fx="$ATTNKIT_SOURCE/tests/fixtures/data"
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

num() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }
nowall() { sed 's/"tokens_per_s":[^,}]*,\{0,1\}//' "$@"; }  # metrics without the wall-clock field
# tiny: 64 examples in batches of 16 = 4 steps an epoch
model=(--task reverse --vocab-size 5 --min-len 2 --max-len 4 --train-size 64 --valid-size 8 --model gru
       --attention additive --hidden 9 --embed 5 --batch 16 --threads 1)
tiny=("${model[@]}" --lr 0.02)
# wait_lines FILE N: until FILE has N lines (a run in the background has got that far), at most ~20 s
wait_lines() {
  for _ in $(seq 400); do
    [[ -f "$1" && "$(wc -l < "$1")" -ge "$2" ]] && return 0
    sleep 0.05
  done
  fail "$1 never reached $2 lines"
}

# --- --epochs N: N epochs of 4 steps; refused together with --steps (exit 2)
seq2seq-train "${tiny[@]}" --epochs 3 --save e.json > esum.json || fail "--epochs exited $?"
[[ "$(num esum.json step)" == 12 ]] || fail "--epochs 3 ran $(num esum.json step) steps, expected 12"
expect_error 2 "--steps excludes --epochs" seq2seq-train "${tiny[@]}" --epochs 3 --steps 5 --save x.json

# --- --plot: training and validation loss against step, an SVG that parses
seq2seq-train "${tiny[@]}" --steps 12 --log-every 4 --save p.json --metrics p.jsonl --plot p.svg > /dev/null ||
  fail "--plot exited $?"
python3 - <<'PY' || fail "p.svg: not the expected plot"
import xml.etree.ElementTree as ET
root = ET.parse("p.svg").getroot()
ns = "{http://www.w3.org/2000/svg}"
lines = root.findall(f".//{ns}polyline")
assert len(lines) == 2, len(lines)  # training and validation loss
assert all(len(l.get("points").split()) == 3 for l in lines), [l.get("points") for l in lines]  # steps 4, 8, 12
text = ET.tostring(root, encoding="unicode")
assert "validation loss" in text and "training loss" in text and "step" in text
PY
# a single logged step: still a valid SVG (the dot and a note), and a warning on stderr
seq2seq-train "${tiny[@]}" --steps 4 --log-every 4 --save p1.json --plot p1.svg > /dev/null 2> p1.err ||
  fail "--plot with one logged step exited $?"
grep -qF "seq2seq-train: warning: p1.svg has a single logged step" p1.err || fail "one logged step: no warning: $(cat p1.err)"
python3 -c 'import xml.etree.ElementTree as ET; t = ET.tostring(ET.parse("p1.svg").getroot(), encoding="unicode"); assert "one logged step" in t' ||
  fail "p1.svg: not a valid SVG with the note"
seq2seq-train "${tiny[@]}" --steps 8 --log-every 4 --save p2.json --plot p2.svg > /dev/null 2> p2.err || fail "--plot exited $?"
grep -q "single logged step" p2.err && fail "two logged steps warned: $(cat p2.err)"

# --- the progress bar: on a terminal (script gives the run one), not on a pipe or a file
script -qec "seq2seq-train ${tiny[*]} --steps 8 --save bar.json > bar_out.json" /dev/null > tty.txt 2>&1 ||
  fail "the run under a terminal exited $?"
grep -q 'step 8/8 \[####################\] 100%  loss [0-9.]*  [0-9]* tok/s  ETA 0:00' tty.txt ||
  fail "no progress bar on a terminal: $(head -c 300 tty.txt)"
# in a 50-column pane every redraw fits in 49 columns (a wider line wraps, and each redraw scrolls a line)
script -qec "stty cols 50 rows 20; seq2seq-train ${tiny[*]} --steps 8 --save bar50.json > bar50_out.json" /dev/null > tty50.txt 2>&1 ||
  fail "the run under a 50-column terminal exited $?"
grep -q 'step 8/8 \[#*\] 100%  loss [0-9.]*' tty50.txt || fail "no progress bar on a 50-column terminal: $(head -c 300 tty50.txt)"
tr '\r' '\n' < tty50.txt | sed 's/\x1b\[K//g' | awk 'length > 49 { bad = 1 } END { exit bad }' ||
  fail "a progress line wider than a 50-column terminal: $(tr '\r' '\n' < tty50.txt | awk 'length > 49' | head -2)"
seq2seq-train "${tiny[@]}" --steps 8 --save nobar.json > /dev/null 2> nobar.txt || fail "run exited $?"
[[ ! -s nobar.txt ]] || fail "progress or messages on a stderr that is a file: $(head -c 300 nobar.txt)"

# --- SIGINT: the step finishes, the checkpoint is saved, exit 130; resumed, the metrics are those of the
#     uninterrupted run (constant learning rate, so the interrupted run's --steps does not matter)
seq2seq-train "${tiny[@]}" --steps 100000 --log-every 10 --save i.json --metrics i.jsonl > i_out.txt 2> i_err.txt &
pid=$!; pids+=("$pid")
wait_lines i.jsonl 1
kill -INT "$pid"
status=0; wait "$pid" || status=$?
[[ "$status" == 130 ]] || fail "SIGINT: exit $status, expected 130 ($(cat i_err.txt))"
[[ ! -s i_out.txt ]] || fail "SIGINT: a summary on stdout: $(cat i_out.txt)"
stopped="$(num i.json step)"
grep -q "SIGINT: stopped after step $stopped; the checkpoint i.json continues with --resume i.json" i_err.txt ||
  fail "SIGINT message: $(cat i_err.txt)"
(( stopped >= 10 )) || fail "SIGINT: stopped at step $stopped, before the first metrics line"
total=$(( (stopped / 10 + 2) * 10 ))  # past the stop, wherever a loaded machine let it land
seq2seq-train "${tiny[@]}" --steps "$total" --log-every 10 --save u.json --metrics u.jsonl > /dev/null ||
  fail "uninterrupted run exited $?"
seq2seq-train "${tiny[@]}" --steps "$total" --log-every 10 --resume i.json --save i.json --metrics i.jsonl > /dev/null ||
  fail "resume after SIGINT exited $?"
[[ "$(nowall i.jsonl)" == "$(nowall u.jsonl)" ]] ||
  fail "interrupted + resumed metrics differ from the uninterrupted run's: $(diff <(nowall u.jsonl) <(nowall i.jsonl))"

# --- SIGTERM: exit 143, a complete checkpoint
seq2seq-train "${tiny[@]}" --steps 100000 --log-every 10 --save t.json --metrics t.jsonl > /dev/null 2> t_err.txt &
pid=$!; pids+=("$pid")
wait_lines t.jsonl 1
kill -TERM "$pid"
status=0; wait "$pid" || status=$?
[[ "$status" == 143 ]] || fail "SIGTERM: exit $status, expected 143 ($(cat t_err.txt))"
grep -q "SIGTERM: stopped after step" t_err.txt || fail "SIGTERM message: $(cat t_err.txt)"
(( "$(num t.json step)" >= 10 )) || fail "SIGTERM: checkpoint at step $(num t.json step)"

# --- a non-finite loss (SGD with a learning rate near float's limit): exit 1 naming the step; with
#     --save-every 1 the last checkpoint is the last good step's
expect_error 1 "(the last checkpoint is kept)" seq2seq-train "${model[@]}" --optimizer sgd --lr 1e38 --clip 0 \
  --steps 10 --save-every 1 --save nan.json
grep -qE "training: (step [0-9]+: the gradient norm is (NaN|-?inf)|the loss is (NaN|-?inf) at step [0-9]+)" err.txt ||
  fail "the non-finite message: $(cat err.txt)"
bad_step="$(grep -oE 'step [0-9]+' err.txt | head -n 1 | cut -d' ' -f2)"
[[ "$(num nan.json step)" == "$((bad_step - 1))" ]] ||
  fail "after the non-finite step $bad_step, the checkpoint is at step $(num nan.json step)"
python3 -c "
import json, math
d = json.load(open('nan.json'))
assert all(math.isfinite(x) for r in d['output']['weight'] for x in r)" || fail "the kept checkpoint is not finite"

# --- SIGKILL at varied moments of runs that save every step: each time, the checkpoint on disk is complete
#     (it parses) and resumable, and the next run continues from it
seq2seq-train "${tiny[@]}" --steps 1 --save k.json > /dev/null || fail "first run for the kill loop exited $?"
last=1
for delay in 0.05 0.13 0 0.21 0.08 0.3 0.01 0.17; do
  seq2seq-train "${tiny[@]}" --steps 100000 --save-every 1 --resume k.json --save k.json > /dev/null 2>&1 &
  pid=$!; pids+=("$pid")
  # from its first save on (startup takes longer under the sanitizers), then a varied delay
  before="$(stat -c %y k.json)"
  for _ in $(seq 400); do [[ "$(stat -c %y k.json)" != "$before" ]] && break; sleep 0.05; done
  sleep "$delay"
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  step="$(python3 -c "import json; d = json.load(open('k.json')); assert d['format'] == 'attnkit-seq2seq'; print(d['step'])")" ||
    { fail "after kill -9 at ${delay}s, k.json is not a complete checkpoint: $(tail -c 200 k.json)"; break; }
  (( step >= last )) || fail "after kill -9 at ${delay}s the checkpoint went back from step $last to $step"
  last=$step
done
seq2seq-train "${tiny[@]}" --steps "$last" --resume k.json --save k2.json > ksum.json ||
  fail "the checkpoint left by kill -9 does not resume"
[[ "$(num ksum.json step)" == "$last" ]] || fail "resume after kill -9: $(cat ksum.json)"
(( last > 1 )) || fail "the kill loop never got past step 1 (no save happened)"
rm -f .k.json.tmp.*  # a process killed while writing leaves its temporary (never a half-written k.json)

# --- --vocab FILE: one token per line; stored in the checkpoint; a different one refused on resume, naming it
printf 'hello\thh ax l ow\nworld\tw er l d z\n' > g2p.tsv
printf 'h\ne\nl\no\nw\nr\nd\nhh\nax\now\ner\n' > v1.txt
seq2seq-train --train g2p.tsv --target-tokenizer space --tokenizer char --vocab v1.txt --model lstm --hidden 6 \
  --embed 4 --batch 2 --steps 2 --threads 1 --save v.json > /dev/null 2> v_err.txt || fail "--vocab exited $?"
grep -q "g2p.tsv: 0 source and 1 target tokens are not in v1.txt (read as <unk>)" v_err.txt ||
  fail "--vocab: the unknown tokens not reported: $(cat v_err.txt)"
python3 -c "
import json
d = json.load(open('v.json'))
expect = ['<pad>', '<bos>', '<eos>', '<unk>'] + open('v1.txt').read().split()
assert d['vocab']['source']['tokens'] == expect and d['vocab']['target']['tokens'] == expect, d['vocab']" ||
  fail "the checkpoint's vocabulary is not the file's"
# the checkpoint itself (its JSON form) is a vocabulary file too
seq2seq-train --train g2p.tsv --target-tokenizer space --vocab v.json --steps 3 --threads 1 --batch 2 --resume v.json \
  --save v.json > /dev/null 2>&1 || fail "--vocab CHECKPOINT with --resume exited $?"
printf 'h\ne\nl\no\nw\nr\nd\nhh\nax\now\ner\nl\n' > dup.txt
expect_error 1 "dup.txt: line 12 is \"l\" again" seq2seq-train --train g2p.tsv --vocab dup.txt --model lstm \
  --steps 1 --save x.json
printf 'h\ne\nl\no\nw\nr\nd\nhh\nax\now\ner\nuw\n' > v2.txt
cp v.json v_keep.json
expect_error 1 "v.json: source vocabulary: the vocabulary differs: 15 tokens in v.json, 16 in v2.txt" \
  seq2seq-train --train g2p.tsv --target-tokenizer space --vocab v2.txt --steps 9 --threads 1 --resume v.json --save v.json
cmp -s v.json v_keep.json || fail "a refused --vocab resume changed the checkpoint"

# --- bad input: exit 1 naming the file and the reason; the checkpoint (also the --save target) left as it was
cp p.json keep.json
printf 'not json {' > corrupt.json
expect_error 1 "corrupt.json" seq2seq-train "${tiny[@]}" --steps 20 --resume corrupt.json --save p.json
head -c 2000 p.json > cut.json
expect_error 1 "cut.json" seq2seq-train "${tiny[@]}" --steps 20 --resume cut.json --save p.json
printf '{"format": "attnkit-seq2seq", "version": "7"}' > future.json
expect_error 1 "future.json: checkpoint version \"7\" is not supported" seq2seq-train "${tiny[@]}" --steps 20 \
  --resume future.json --save p.json
python3 -c "
import json
d = json.load(open('p.json')); d['step'] = '-4'
json.dump(d, open('badstep.json', 'w'))"
expect_error 1 "badstep.json: \"step\" is \"-4\", not a non-negative integer" seq2seq-train "${tiny[@]}" --steps 20 \
  --resume badstep.json --save p.json
expect_error 1 "p.json: source vocabulary: the vocabulary differs" seq2seq-train --task reverse --vocab-size 6 \
  --min-len 2 --max-len 4 --train-size 64 --valid-size 8 --steps 20 --threads 1 --resume p.json --save p.json
cmp -s p.json keep.json || fail "a refused resume changed the checkpoint"
: > empty.tsv
expect_error 1 "empty.tsv: the file is empty" seq2seq-train --train empty.tsv --model lstm --steps 1 --save p.json
printf 'ab\tba\nabcdef\tfedcba\n' > long.tsv
expect_error 1 "long.tsv:2: source has 6 tokens, more than the maximum length 4" seq2seq-train --train long.tsv \
  --max-len 4 --model lstm --steps 1 --save p.json
cmp -s p.json keep.json || fail "a failed run changed the checkpoint"
ls -a | grep -q '\.tmp\.' && fail "a failed run left a temporary: $(ls -a | grep '\.tmp\.')"

finish seq2seq_train_ops

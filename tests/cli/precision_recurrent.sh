#!/usr/bin/env bash
# The recurrent family in lower precision: lstm-run --precision int8|bf16 stays within the bound of PyTorch's float32
# outputs on the fixtures (int8 0.03, bf16 0.01, as the unit tests); --keep-fp32 by state_dict name, and the
# refusals (a pattern that matches nothing, --keep-fp32 with fp32, --grad-output) with nothing on stdout; a small
# LSTM encoder-decoder with attention trained on the reverse task to full exact match decodes the same in int8,
# bf16 and fp32 (greedy and beam) through transformer-decode, and seq2seq-eval scores it in each precision; other
# attention kinds and cells, and recurrent language models (tied or not), run in both.
set -euo pipefail
fx="$ATTNKIT_SOURCE/tests/fixtures/recurrent"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

# --- lstm-run on the PyTorch fixtures, within the bound
for name in torch_lstm_2layer_bi_lengths torch_lstm_h20_bi torch_gru_2layer_bi_h0 torch_rnn_2layer_bi_lengths; do
  f="$fx/$name.json"
  cell=lstm
  case "$name" in torch_gru_*) cell=gru ;; torch_rnn_*) cell=rnn ;; esac
  args=("$f#x" --weights "$f#weights" --cell "$cell" --threads 1)
  grep -q '"h0":' "$f" && args+=(--h0 "$f#h0")
  grep -q '"c0":' "$f" && args+=(--c0 "$f#c0")
  grep -q '"lengths":' "$f" && args+=(--lengths "$f#lengths")
  for p in int8:0.03 bf16:0.01; do
    lstm-run "${args[@]}" --precision "${p%:*}" > out.json 2> err.txt || { fail "$name ${p%:*}: exited $?"; continue; }
    grep -q "lstm-run: ${p%:*}: " err.txt || fail "$name ${p%:*}: no summary on stderr: $(cat err.txt)"
    tensor diff out.json#output "$f#expected/output" --atol "${p#*:}" --rtol 0 --quiet ||
      fail "$name ${p%:*}: output beyond ${p#*:} of PyTorch's float32"
    tensor diff out.json#h_n "$f#expected/h_n" --atol "${p#*:}" --rtol 0 --quiet || fail "$name ${p%:*}: h_n beyond the bound"
    # and not the float32 values themselves (the products did run in lower precision)
    tensor diff out.json#output "$f#expected/output" --atol 1e-6 --rtol 0 --quiet 2> /dev/null &&
      fail "$name ${p%:*}: the float32 output"
  done
done
f="$fx/torch_lstm_2layer_bi_lengths.json"
run=("$f#x" --weights "$f#weights" --h0 "$f#h0" --c0 "$f#c0" --lengths "$f#lengths" --threads 1)
lstm-run "${run[@]}" > fp32.json || fail "fp32 run exited $?"
lstm-run "${run[@]}" --precision int8 --keep-fp32 'weight_*' > kept.json 2> err.txt || fail "--keep-fp32 'weight_*' exited $?"
tensor diff kept.json fp32.json --atol 0 --rtol 0 --quiet || fail "every matrix kept in float32 differs from fp32"
grep -q "8 kept in float32 (weight_\*)" err.txt || fail "--keep-fp32 summary: $(cat err.txt)"
lstm-run "${run[@]}" --precision int8 --keep-fp32 'weight_hh_*' > hh.json 2> err.txt || fail "--keep-fp32 weight_hh_* exited $?"
grep -q "4 kept in float32" err.txt || fail "--keep-fp32 weight_hh_*: $(cat err.txt)"
tensor diff hh.json fp32.json --atol 1e-6 --rtol 0 --quiet 2> /dev/null && fail "W_ih in int8 changed nothing"
expect_error 2 "--keep-fp32 weight_xx*: no weight matrix" lstm-run "${run[@]}" --precision int8 --keep-fp32 'weight_xx*'
expect_error 2 "--keep-fp32 goes with --precision bf16 or int8" lstm-run "${run[@]}" --keep-fp32 'weight_*'
expect_error 2 "--grad-output needs the float32 weights" lstm-run "${run[@]}" --precision bf16 --grad-output "$f#x"
expect_error 2 "--precision" lstm-run "${run[@]}" --precision fp16

# --- a recurrent encoder-decoder with attention: trained to full exact match, the same outputs in each precision
seq2seq-train --task reverse --vocab-size 6 --min-len 2 --max-len 6 --train-size 512 --valid-size 32 --batch 32 \
  --lr 0.02 --threads 1 --steps 300 --model lstm --attention additive --hidden 32 --embed 16 --save m.json > train.json ||
  fail "seq2seq-train exited $?"
python3 -c 'import json; r = json.load(open("train.json")); assert r["exact_match"] == 1.0, r' || fail "not at exact match 1"
python3 - <<'PY'
import random
r = random.Random(5)
with open("src.txt", "w") as f, open("test.tsv", "w") as t:
    for _ in range(40):
        s = " ".join(str(r.randrange(6)) for _ in range(r.randint(2, 6)))
        f.write(s + "\n")
        t.write(s + "\t" + " ".join(reversed(s.split())) + "\n")
PY
texts() { python3 -c 'import json, sys; [print(json.loads(l)["text"]) for l in open(sys.argv[1])]' "$1"; }
for s in "--strategy greedy" "--strategy beam --beam 3"; do
  transformer-decode m.json --threads 1 $s < src.txt > fp32.jsonl || fail "$s fp32 exited $?"
  texts fp32.jsonl > fp32.txt
  for p in int8 bf16; do
    transformer-decode m.json --threads 1 $s --precision $p < src.txt > $p.jsonl 2> err.txt || fail "$s $p exited $?"
    grep -q "transformer-decode: $p: 6 weight matrices" err.txt || fail "$s $p: summary: $(cat err.txt)"
    texts $p.jsonl | cmp -s - fp32.txt || fail "$s $p: a different output from fp32"
  done
done
expect_error 2 "--keep-fp32 attention.*: no weight matrix" transformer-decode m.json --precision int8 --keep-fp32 'attention.*' < src.txt
for p in fp32 int8 bf16; do
  seq2seq-eval m.json test.tsv --threads 1 --precision $p > eval.json 2> err.txt || fail "seq2seq-eval $p exited $?"
  python3 - "$p" <<'PY' || fail "seq2seq-eval $p: $(cat eval.json)"
import json, sys
r = json.load(open("eval.json"))
assert r["exact_match"] == 1.0 and r["wer"] == 0.0, r
assert r.get("precision", "fp32") == sys.argv[1] and (sys.argv[1] != "fp32" or "precision" not in r), r
PY
done
seq2seq-eval m.json test.tsv --threads 1 --precision int8 --format table 2> /dev/null | head -1 | grep -q ", int8 weights" ||
  fail "seq2seq-eval --format table does not name the precision"
expect_error 2 "--keep-fp32 nothing: no weight matrix" seq2seq-eval m.json test.tsv --precision bf16 --keep-fp32 nothing

# --- other cells and attention kinds (a few steps: they run, and say what they lowered)
for m in "--model gru --attention general --attention-style bahdanau --layers 2" "--model rnn --attention dot --bidirectional" \
         "--model lstm --attention none"; do
  seq2seq-train --task copy --vocab-size 5 --max-len 4 --train-size 32 --valid-size 4 --batch 8 --steps 3 --threads 1 \
    --hidden 8 --embed 8 $m --save o.json > /dev/null || { fail "$m: seq2seq-train exited $?"; continue; }
  for p in int8 bf16; do
    transformer-decode o.json --threads 1 --precision $p --strategy beam --beam 2 < src.txt > /dev/null 2> err.txt ||
      fail "$m $p: exited $?"
    grep -q "transformer-decode: $p: " err.txt || fail "$m $p: summary: $(cat err.txt)"
  done
done

# --- recurrent language models, with their own output layer and tied to the embedding
for i in $(seq 30); do echo "the cat sat on the mat and the dog ran"; done > lm.txt
seq2seq-train --model lstm-lm --train lm.txt --context 8 --hidden 16 --embed 16 --steps 5 --batch 4 --threads 1 \
  --save lm.json > /dev/null || fail "lstm-lm exited $?"
seq2seq-train --model gru-lm --train lm.txt --context 8 --hidden 16 --embed 16 --tied --steps 5 --batch 4 --threads 1 \
  --save tied.json > /dev/null || fail "gru-lm --tied exited $?"
for m in lm tied; do
  for p in int8 bf16; do
    transformer-decode $m.json --prompt "the cat" --max-new-tokens 6 --precision $p --threads 1 -o o.jsonl 2> err.txt ||
      fail "$m $p: exited $?"
    grep -q "transformer-decode: $p: 3 weight matrices" err.txt || fail "$m $p: summary: $(cat err.txt)"
  done
done
transformer-decode tied.json --prompt "the" --max-new-tokens 2 --precision int8 --keep-fp32 'embed.*' -o o.jsonl 2> err.txt ||
  fail "tied --keep-fp32 embed.* exited $?"
grep -q "1 kept in float32 (embed\.\*)" err.txt || fail "tied --keep-fp32: $(cat err.txt)"

finish precision_recurrent

#!/usr/bin/env bash
# seq2seq-eval end to end on tiny checkpoints trained here (recurrent and Transformer): the JSON fields;
# a test set whose references are the model's own greedy outputs scores WER 0; a hand-made set where the
# answer is known (one word right through its second reference, one wrong by one token) scores WER 1/2
# and PER 1 / (its reference tokens); beam 1 equals greedy; the table; the error contract.
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

train() { seq2seq-train --task reverse --vocab-size 6 --min-len 2 --max-len 5 --train-size 64 --valid-size 8 \
  --batch 16 --lr 0.02 --threads 1 --steps 60 "$@" > /dev/null; }
train --model lstm --attention dot --hidden 16 --embed 8 --save lstm.json || fail "seq2seq-train (lstm) exited $?"
train --model transformer --layers 1 --heads 2 --d-model 16 --ff 32 --save tf.json || fail "seq2seq-train (transformer) exited $?"
printf '1 2 3\n4 0 5 1\n2 2\n5 4 3 2 1\n' > src.txt

for m in lstm tf; do
  # the model's own greedy outputs as references (an empty output has none: the line is left out)
  transformer-decode $m.json --threads 1 --max-len 8 < src.txt > out.jsonl || fail "$m: transformer-decode exited $?"
  python3 - "$m" <<'PY' || fail "$m: making the test sets"
import json, sys
srcs = open("src.txt").read().split("\n")[:-1]
outs = [json.loads(l)["text"] for l in open("out.jsonl")]
with open("self.tsv", "w") as f:
    for s, o in zip(srcs, outs):
        f.write(f"{s}\t{o}\n" if o else "")
# hand-made: word 1 has a wrong first reference and its own output second (right: any reference counts);
# word 2 has one reference, its output with one token more (wrong, 1 edit)
assert outs[0] and outs[1], outs
with open("known.tsv", "w") as f:
    f.write(f"{srcs[0]}\t{outs[0]} 5 5\n{srcs[0]}\t{outs[0]}\n{srcs[1]}\t{outs[1]} 3\n")
json.dump({"n0": len(outs[0].split()), "n1": len(outs[1].split()), "self": sum(1 for o in outs if o)}, open("lens.json", "w"))
PY
  seq2seq-eval $m.json self.tsv --threads 1 --max-len 8 > self.json || fail "$m: seq2seq-eval exited $?"
  python3 - <<'PY' || fail "$m: self references: $(cat self.json)"
import json
r, n = json.load(open("self.json")), json.load(open("lens.json"))
for k in ["test", "lines", "words", "exact_match", "token_accuracy", "wer", "per", "wrong_words", "edits",
          "reference_tokens", "unfinished", "unknown_source_tokens", "strategy", "wrong"]:
    assert k in r, k
assert r["words"] == r["lines"] == n["self"] >= 1, r
assert r["wer"] == 0 and r["per"] == 0 and r["exact_match"] == 1 and r["token_accuracy"] == 1 and r["wrong"] == [], r
assert r["strategy"] == "greedy", r
PY
  seq2seq-eval $m.json known.tsv --threads 1 --max-len 8 --show 5 > known.json || fail "$m: seq2seq-eval known exited $?"
  python3 - <<'PY' || fail "$m: hand-made set: $(cat known.json; cat known.tsv)"
import json
r, n = json.load(open("known.json")), json.load(open("lens.json"))
assert r["lines"] == 3 and r["words"] == 2 and r["wrong_words"] == 1 and r["wer"] == 0.5 and r["exact_match"] == 0.5, r
assert r["edits"] == 1 and r["reference_tokens"] == n["n0"] + n["n1"] + 1, r
assert abs(r["per"] - 1 / (n["n0"] + n["n1"] + 1)) < 1e-12, r
# token accuracy: word 1 all right, word 2 right but for the missing last token
assert r["token_accuracy"] == (n["n0"] + n["n1"]) / (n["n0"] + n["n1"] + 1), r
assert len(r["wrong"]) == 1 and r["wrong"][0]["reference"].endswith(" 3"), r
PY
  # beam 1 is greedy; JSONL reads as TSV does
  seq2seq-eval $m.json known.tsv --threads 1 --max-len 8 --show 5 --strategy beam --beam 1 > beam1.json || fail "$m: beam exited $?"
  python3 -c 'import json; a, b = json.load(open("known.json")), json.load(open("beam1.json")); a.pop("strategy"); b.pop("strategy"); b.pop("beam"); assert a == b, (a, b)' ||
    fail "$m: beam 1 differs from greedy: $(cat beam1.json)"
  python3 -c 'import json
with open("known.jsonl", "w") as f:
    for l in open("known.tsv"):
        s, t = l.rstrip("\n").split("\t"); f.write(json.dumps({"src": s, "tgt": t}) + "\n")'
  seq2seq-eval $m.json known.jsonl --threads 1 --max-len 8 --show 5 > known2.json || fail "$m: JSONL exited $?"
  python3 -c 'import json; a, b = json.load(open("known.json")), json.load(open("known2.json")); a.pop("test"); b.pop("test"); assert a == b, (a, b)' ||
    fail "$m: JSONL differs from TSV: $(cat known2.json)"
  cp known.tsv known-$m.tsv
done

# --- the table
seq2seq-eval lstm.json known-lstm.tsv --threads 1 --max-len 8 --format table --show 1 > t.txt || fail "table exited $?"
grep -qE '^WER +50\.00 %' t.txt || fail "table: $(cat t.txt)"
grep -qE '^exact match +50\.00 % +\(1 of 2 words\)' t.txt || fail "table: $(cat t.txt)"
grep -q '^wrong: ' t.txt || fail "table: no wrong prediction shown: $(cat t.txt)"

# --- ensembles: a model with itself scores as the model alone; the recurrent model and the Transformer
# (trained on the same task: the same vocabularies) decode together
seq2seq-eval lstm.json known-lstm.tsv --threads 1 --max-len 8 --show 5 > one.json || fail "lstm alone exited $?"
seq2seq-eval lstm.json known-lstm.tsv --threads 1 --max-len 8 --show 5 --ensemble lstm.json > two.json ||
  fail "--ensemble lstm.json exited $?"
python3 -c 'import json; a, b = json.load(open("one.json")), json.load(open("two.json")); assert b.pop("models") == 2 and a == b, (a, b)' ||
  fail "a model ensembled with itself scores otherwise: $(cat two.json)"
seq2seq-eval lstm.json known-lstm.tsv --threads 1 --max-len 8 --ensemble tf.json --strategy beam --beam 2 \
  --format table > mixed.txt || fail "--ensemble tf.json exited $?"
grep -q 'beam search (beam 2), an ensemble of 2 models$' mixed.txt || fail "ensemble table: $(cat mixed.txt)"
seq2seq-train --task reverse --vocab-size 7 --min-len 2 --max-len 5 --train-size 64 --valid-size 8 --batch 16 \
  --threads 1 --steps 2 --model gru --hidden 8 --embed 4 --save v7.json > /dev/null || fail "seq2seq-train (7) exited $?"
expect_error 1 "ensemble: the source vocabularies differ: 10 tokens in lstm.json, 11 in v7.json" \
  seq2seq-eval lstm.json known.tsv --ensemble v7.json
expect_error 1 "missing.json" seq2seq-eval lstm.json known.tsv --ensemble missing.json
expect_error 2 "The following argument was not expected: tf.json" seq2seq-eval lstm.json known.tsv --ensemble v7.json tf.json

# --- rescoring: a model rescoring its own beam ranks it as the beam did; a right-to-left model rescores a
# left-to-right one's beam, and is refused beside it in an ensemble
seq2seq-eval lstm.json known-lstm.tsv --threads 1 --max-len 8 --show 5 --strategy beam --beam 3 > beam.json ||
  fail "beam exited $?"
seq2seq-eval lstm.json known-lstm.tsv --threads 1 --max-len 8 --show 5 --strategy beam --beam 3 --rescore lstm.json \
  > self-rescored.json || fail "--rescore lstm.json exited $?"
python3 -c 'import json; a, b = json.load(open("beam.json")), json.load(open("self-rescored.json")); assert b.pop("rescorers") == 1 and a == b, (a, b)' ||
  fail "a model rescoring its own beam scores otherwise: $(cat self-rescored.json)"
seq2seq-train --task reverse --vocab-size 6 --min-len 2 --max-len 5 --train-size 64 --valid-size 8 --batch 16 \
  --lr 0.01 --threads 1 --steps 300 --model lstm --attention dot --hidden 32 --embed 16 --right-left --save rl.json \
  > /dev/null || fail "seq2seq-train --right-left exited $?"
python3 -c 'import json; t = json.load(open("rl.json"))["training"]; assert t["right_left"] == "true" and t["options"]["--right-left"] == "true", t' ||
  fail "rl.json does not say it is right to left"
seq2seq-eval lstm.json known-lstm.tsv --threads 1 --max-len 8 --strategy beam --beam 3 --rescore rl.json --format table \
  > rescored.txt || fail "--rescore rl.json exited $?"
grep -q 'beam search (beam 3), rescored by 1 model$' rescored.txt || fail "rescored table: $(cat rescored.txt)"
# alone, the right-to-left model's outputs read left to right: on the reverse task, mostly the source reversed
transformer-decode rl.json --threads 1 --max-len 8 < src.txt > rl-out.jsonl || fail "transformer-decode rl.json exited $?"
python3 - <<'PY' || fail "right-to-left outputs are not in reading order: $(cat rl-out.jsonl)"
import json
srcs = open("src.txt").read().split("\n")[:-1]
outs = [json.loads(l)["tokens"] for l in open("rl-out.jsonl")]
right = sum(o == s.split()[::-1] for s, o in zip(srcs, outs))
assert right >= 3, (srcs, outs)
PY
expect_error 2 "--rescore goes with --strategy beam" seq2seq-eval lstm.json known.tsv --rescore rl.json
# --rescore-union: a model's own beam joins nothing new to its beam; the right-to-left model's beam joins
seq2seq-eval lstm.json known-lstm.tsv --threads 1 --max-len 8 --show 5 --strategy beam --beam 3 --rescore lstm.json \
  --rescore-union > self-union.json || fail "--rescore-union exited $?"
python3 -c 'import json; a, b = json.load(open("beam.json")), json.load(open("self-union.json")); assert b.pop("rescorers") == 1 and b.pop("rescore_union") is True and a == b, (a, b)' ||
  fail "a model's own beam joined to its beam scores otherwise: $(cat self-union.json)"
seq2seq-eval lstm.json known-lstm.tsv --threads 1 --max-len 8 --strategy beam --beam 3 --rescore rl.json --rescore-union \
  --format table > union.txt || fail "--rescore rl.json --rescore-union exited $?"
grep -q 'beam search (beam 3), rescored by 1 model, beams joined$' union.txt || fail "joined table: $(cat union.txt)"
expect_error 2 "--rescore-union goes with --rescore" seq2seq-eval lstm.json known.tsv --strategy beam --rescore-union
# --rescore-weight 0: the rescoring model counts for nothing, the beam's own ranking stays
seq2seq-eval lstm.json known-lstm.tsv --threads 1 --max-len 8 --show 5 --strategy beam --beam 3 --rescore rl.json \
  --rescore-weight 0 > rweight0.json || fail "--rescore-weight 0 exited $?"
python3 -c 'import json; a, b = json.load(open("beam.json")), json.load(open("rweight0.json")); assert b.pop("rescorers") == 1 and a == b, (a, b)' ||
  fail "a rescoring model of weight 0 changed the beam's ranking: $(cat rweight0.json)"
expect_error 2 "--rescore-weight goes with --rescore" seq2seq-eval lstm.json known.tsv --strategy beam --rescore-weight 0.5 \
  --rescore-inverse lstm.json
expect_error 2 "--rescore-union goes with --rescore" seq2seq-eval lstm.json known.tsv --strategy beam --rescore-union \
  --rescore-inverse lstm.json
# an inverse model (target -> source): on the reverse task a reversing model reads either side
seq2seq-eval lstm.json known-lstm.tsv --threads 1 --max-len 8 --strategy beam --beam 3 --rescore rl.json \
  --rescore-inverse lstm.json --format table > inverse.txt || fail "--rescore-inverse lstm.json exited $?"
grep -q 'beam search (beam 3), rescored by 2 models$' inverse.txt || fail "inverse-rescored table: $(cat inverse.txt)"
expect_error 2 "--rescore-inverse goes with --strategy beam" seq2seq-eval lstm.json known.tsv --rescore-inverse lstm.json
# weight 0: the inverse model counts for nothing, the beam's own ranking (here: --rescore rl.json's) stays
seq2seq-eval lstm.json known-lstm.tsv --threads 1 --max-len 8 --show 5 --strategy beam --beam 3 --rescore-inverse rl.json \
  --inverse-weight 0 > weight0.json || fail "--inverse-weight 0 exited $?"
python3 -c 'import json; a, b = json.load(open("beam.json")), json.load(open("weight0.json")); assert b.pop("rescorers") == 1 and a == b, (a, b)' ||
  fail "an inverse model of weight 0 changed the beam's ranking: $(cat weight0.json)"
expect_error 2 "--inverse-weight goes with --rescore-inverse" seq2seq-eval lstm.json known.tsv --strategy beam --inverse-weight 0.5
expect_error 2 "--inverse-weight" seq2seq-eval lstm.json known.tsv --strategy beam --rescore-inverse lstm.json --inverse-weight -1
expect_error 1 "rescoring: the source vocabularies differ (read the other way: an inverse model's source is the target): 10 tokens in lstm.json, 11 in v7.json" \
  seq2seq-eval lstm.json known.tsv --strategy beam --rescore-inverse v7.json
expect_error 1 "rl.json produces its outputs right to left and lstm.json left to right" \
  seq2seq-eval lstm.json known.tsv --ensemble rl.json
expect_error 1 "rescoring: the source vocabularies differ: 10 tokens in lstm.json, 11 in v7.json" \
  seq2seq-eval lstm.json known.tsv --strategy beam --rescore v7.json

# --- the error contract: usage 2, bad input 1, nothing on stdout
expect_error 2 "--beam goes with --strategy beam" seq2seq-eval lstm.json known.tsv --beam 3
expect_error 2 "--strategy: sample not in {greedy,beam}" seq2seq-eval lstm.json known.tsv --strategy sample
printf '1 2 3\n' > notab.tsv
expect_error 1 "notab.tsv:1: no tab between source and target" seq2seq-eval lstm.json notab.tsv
expect_error 1 "missing.json" seq2seq-eval missing.json known.tsv
finish seq2seq_eval

#!/usr/bin/env bash
# seq2seq-train --tokenizer spm / --target-tokenizer spm with encoder-decoders: a tiny GRU with attention and a
# tiny Transformer on SentencePiece pieces of both sides of a TSV (each side its own model, both stored in the
# checkpoint, JSON and .safetensors); seq2seq-eval scores the detokenized text and transformer-decode prints it;
# one side spm and the other char; resume goes on with the stored models and refuses another --spm-model naming
# it; --average keeps the models; the refusals exit 1 (bad input) or 2 (usage), naming the option. A build without
# SentencePiece refuses, naming the package, and the rest is skipped.
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

python3 - <<'PY'
import random
random.seed(5)
de = {"the": "die", "cat": "katze", "sat": "saß", "on": "auf", "a": "einer", "mat": "matte", "and": "und",
      "dog": "hund", "ran": "lief", "to": "zum", "big": "großen", "red": "roten", "house": "haus", "café": "café"}
words = list(de)
lines = []
for i in range(60):
    ws = [random.choice(words) for _ in range(random.randint(1, 4))]
    lines.append(" ".join(ws) + "\t" + " ".join(de[w] for w in ws))
open("pairs.tsv", "w").write("\n".join(lines) + "\n")
open("test.tsv", "w").write("\n".join(lines[:8]) + "\n")
PY
small=(--hidden 16 --embed 16 --batch 8 --lr 0.01 --threads 1 --log-every 100)
both=(--train pairs.tsv --tokenizer spm --vocab-size 30 --target-vocab-size 32)

if [[ "${ATTNKIT_SENTENCEPIECE:-OFF}" != ON ]]; then
  expect_error 2 "this build has no SentencePiece (install libsentencepiece-dev" \
    seq2seq-train "${both[@]}" --model gru --steps 2 --save m.json
  (( fails == 0 )) || exit 1
  echo "skipped: built without SentencePiece (ATTNKIT_SENTENCEPIECE=OFF)"; exit 77
fi

# both sides spm: two models, each with its own vocabulary, in the checkpoint
seq2seq-train "${both[@]}" --valid test.tsv --model gru --attention dot "${small[@]}" --steps 4 --save m.json \
  > sum.json || fail "gru run exited $?"
python3 - <<'PY' || fail "checkpoint: $(head -c 300 m.json)"
import json
c = json.load(open("m.json"))
assert c["training"]["src_tokenizer"] == "spm" == c["training"]["tgt_tokenizer"], c["training"]
assert set(c["spm"]) == {"source", "target"} and c["spm"]["source"] != c["spm"]["target"], list(c["spm"])
src, tgt = c["vocab"]["source"]["tokens"], c["vocab"]["target"]["tokens"]
assert len(src) == 31 and len(tgt) == 33 and src[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"], (src, tgt)
assert src != tgt and any(t.startswith("▁") for t in tgt), tgt
s = json.load(open("sum.json"))
assert s["step"] == 4 and s["valid_examples"] == 8, s
PY

# a transformer learns the pairs; its outputs are text (no "▁"), scored as text
seq2seq-train "${both[@]}" --model transformer --layers 1 --d-model 32 --heads 2 --ff 64 --dropout 0 --batch 8 \
  --lr 0.005 --steps 150 --threads 1 --log-every 1000 --save t.safetensors > /dev/null || fail "transformer exited $?"
seq2seq-eval t.safetensors test.tsv --show 8 > eval.json || fail "seq2seq-eval exited $?"
cut -f1 test.tsv | transformer-decode t.safetensors > dec.jsonl || fail "transformer-decode exited $?"
python3 - <<'PY' || fail "eval / decode: $(cat eval.json) $(head -3 dec.jsonl)"
import json
e = json.load(open("eval.json"))
assert e["lines"] == 8 and e["exact_match"] >= 0.5, e
for w in e["wrong"]:
    assert "▁" not in w["prediction"] + w["reference"] + w["source"] and not w["reference"].startswith(" "), w
refs = [l.split("\t")[1].rstrip("\n") for l in open("test.tsv")]
outs = [json.loads(l) for l in open("dec.jsonl")]
assert len(outs) == 8 and all("▁" not in o["text"] and not o["text"].startswith(" ") for o in outs), outs
right = sum(o["text"] == r for o, r in zip(outs, refs))
assert abs(right / 8 - e["exact_match"]) < 1e-9, (right, e["exact_match"])  # the same text scored
PY

# characters a model lacks read as <unk>, said on stderr
printf 'the cat\tdie katze\nthe xyz\tdie katze\n' > odd.tsv
seq2seq-train "${both[@]}" --valid odd.tsv --model gru "${small[@]}" --steps 1 --save odd.json > /dev/null 2> odd.err ||
  fail "run with odd.tsv exited $?"
grep -qE "odd.tsv: [1-9][0-9]* source and 0 target pieces are <unk> \(characters the SentencePiece models lack\)" odd.err ||
  fail "the <unk> pieces were not said: $(cat odd.err)"

# one side spm, the other char; and the target alone
seq2seq-train --train pairs.tsv --tokenizer spm --vocab-size 30 --target-tokenizer char --model lstm "${small[@]}" \
  --steps 2 --save sc.json > /dev/null || fail "spm/char run exited $?"
seq2seq-train --train pairs.tsv --tokenizer char --target-tokenizer spm --target-vocab-size 32 --model rnn \
  "${small[@]}" --steps 2 --save cs.json > /dev/null || fail "char/spm run exited $?"
python3 - <<'PY' || fail "one-sided checkpoints"
import json
a, b = json.load(open("sc.json")), json.load(open("cs.json"))
assert a["training"]["tgt_tokenizer"] == "char" and set(a["spm"]) == {"source"}, a["training"]
assert b["training"]["src_tokenizer"] == "char" and b["training"]["tgt_tokenizer"] == "spm", b["training"]
assert len(b["vocab"]["target"]["tokens"]) == 33
PY
seq2seq-eval cs.json test.tsv > /dev/null || fail "seq2seq-eval of char/spm exited $?"
printf 'the xyz\tdie katze\n' > oddtest.tsv
seq2seq-eval sc.json oddtest.tsv > odd.json || fail "seq2seq-eval of odd.tsv exited $?"
python3 -c "import json; assert json.load(open('odd.json'))['unknown_source_tokens'] > 0" ||
  fail "the source's <unk> pieces were not counted: $(cat odd.json)"

# the models as .model files: resume goes on with the checkpoint's, accepts them, refuses another naming it
for side in source target; do
  python3 -c "import base64, json, sys; sys.stdout.buffer.write(base64.b64decode(json.load(open('m.json'))['spm']['$side']))" \
    > "$side.model"
done
seq2seq-train --resume m.json --steps 6 --save m.json --threads 1 > /dev/null || fail "resume exited $?"
seq2seq-train --resume m.json --spm-model source.model --target-spm-model target.model --steps 7 --save m.json \
  --threads 1 > /dev/null || fail "resume with the checkpoint's own models exited $?"
expect_error 1 "the SentencePiece model of --target-spm-model source.model differs from the one of m.json (target)" \
  seq2seq-train --resume m.json --target-spm-model source.model --steps 8 --save m2.json
expect_error 1 "--vocab-size 40 disagrees with the checkpoint m.json's source" \
  seq2seq-train --resume m.json --vocab-size 40 --steps 8 --save m2.json
seq2seq-train --resume m.json --tokenizer spm --vocab-size 30 --steps 8 --save m3.json --threads 1 > /dev/null ||
  fail "resume with the source's own --vocab-size exited $?"
# a run with model files stores them; --average keeps them
seq2seq-train --train pairs.tsv --tokenizer spm --spm-model source.model --target-spm-model target.model \
  --model gru --attention dot "${small[@]}" --steps 1 --save f.json > /dev/null || fail "--spm-model run exited $?"
python3 -c "import json; assert json.load(open('f.json'))['spm'] == json.load(open('m.json'))['spm']" ||
  fail "--spm-model / --target-spm-model did not store the models given"
seq2seq-train --average m.json f.json --save avg.json > /dev/null || fail "--average exited $?"
seq2seq-eval avg.json test.tsv > /dev/null || fail "seq2seq-eval of the average exited $?"
[[ ! -e m2.json ]] || fail "a refused resume wrote m2.json"

# refusals
expect_error 1 "--target-vocab-size 9 is too small for pairs.tsv (targets)" \
  seq2seq-train "${both[@]:0:6}" --target-vocab-size 9 --model gru --steps 1 --save x.json
expect_error 1 "--vocab-size 500 is too large for pairs.tsv (sources): SentencePiece finds at most" \
  seq2seq-train --train pairs.tsv --tokenizer spm --vocab-size 500 --model gru --steps 1 --save x.json
expect_error 2 "--target-vocab-size 4 with --target-tokenizer spm: a SentencePiece model's is in [8, 1048576]" \
  seq2seq-train "${both[@]:0:6}" --target-vocab-size 4 --model gru --steps 1 --save x.json
expect_error 2 "--target-tokenizer spm needs --target-vocab-size N" \
  seq2seq-train --train pairs.tsv --target-tokenizer spm --model gru --steps 1 --save x.json
expect_error 2 "--target-vocab-size goes with --target-tokenizer spm" \
  seq2seq-train --train pairs.tsv --tokenizer spm --vocab-size 30 --target-tokenizer char --target-vocab-size 30 \
    --model gru --steps 1 --save x.json
expect_error 2 "--spm-model goes with --tokenizer spm" \
  seq2seq-train --train pairs.tsv --target-tokenizer spm --spm-model source.model --model gru --steps 1 --save x.json
expect_error 2 "--vocab: a side whose tokenizer is spm has its SentencePiece model's vocabulary" \
  seq2seq-train "${both[@]}" --vocab pairs.tsv --model gru --steps 1 --save x.json
expect_error 2 "--tokenizer spm goes with --train FILE" \
  seq2seq-train --task copy --tokenizer spm --model gru --steps 1 --save x.json
printf 'good\tgut\nbad \xc3( here\tschlecht\n' > bad.tsv
expect_error 1 "bad.tsv:2: source: invalid UTF-8 at byte 5 (SentencePiece reads UTF-8 text)" \
  seq2seq-train --train bad.tsv --tokenizer spm --vocab-size 12 --model gru --steps 1 --save x.json
[[ ! -e x.json ]] || fail "a refused run wrote x.json"

finish spm_seq2seq

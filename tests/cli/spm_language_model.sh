#!/usr/bin/env bash
# seq2seq-train --tokenizer spm: a tiny language model (transformer-lm, lstm-lm) on SentencePiece pieces trained
# in memory on its text (nothing left in TMPDIR); the checkpoint holds the SentencePiece model, so that
# transformer-decode generates from it alone (--prompt and prompts on stdin); resume is exact; a different
# --spm-model is refused naming both, the same one accepted; vocabulary sizes out of range or too large for the
# text, invalid UTF-8 and misplaced options are refused (exit 1 for bad input, 2 for usage); a file of more lines
# than --spm-sentences is sampled, saying so. A build without SentencePiece refuses --tokenizer spm, naming the
# package, and the rest is skipped.
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

python3 - <<'PY'
import random
random.seed(3)
words = "the cat sat on a mat , and dog ran to big red house . über café naïve — “quoted” ; 日本 !".split()
lines = []
for i in range(120):
    line = " ".join(random.choice(words) for _ in range(random.randint(0, 14)))
    if i % 9 == 0: line = "  " + line + "  "
    if i % 13 == 0: line += "\tend"
    lines.append(line)
open("train.txt", "w").write("\n".join(lines) + "\n")
open("valid.txt", "w").write("the cat sat on the mat.\nthe dog ran to the big red house!\n")
PY
model=(--model transformer-lm --context 16 --layers 1 --d-model 16 --heads 2 --ff 32 --batch 4 --lr 0.01 --threads 1)
common=("${model[@]}" --train train.txt --valid valid.txt --tokenizer spm)

if [[ "${ATTNKIT_SENTENCEPIECE:-OFF}" != ON ]]; then
  expect_error 2 "this build has no SentencePiece (install libsentencepiece-dev" \
    seq2seq-train "${common[@]}" --vocab-size 60 --steps 2 --save lm.json
  (( fails == 0 )) || exit 1
  echo "skipped: built without SentencePiece (ATTNKIT_SENTENCEPIECE=OFF)"; exit 77
fi

mkdir tmp
TMPDIR="$PWD/tmp" seq2seq-train "${common[@]}" --vocab-size 60 --steps 4 --save lm.json > sum.json ||
  fail "spm run exited $?"
[[ -z "$(ls -A tmp)" ]] || fail "training SentencePiece left files in TMPDIR: $(ls -A tmp)"
python3 - <<'PY' || fail "summary / checkpoint: $(cat sum.json)"
import json
s = json.load(open("sum.json"))
assert s["step"] == 4 and s["valid_tokens"] > 0, s
c = json.load(open("lm.json"))
assert c["training"]["src_tokenizer"] == "spm" == c["training"]["tgt_tokenizer"], c["training"]
assert set(c["spm"]) == {"source"} and len(c["spm"]["source"]) > 100, list(c["spm"])
tokens = c["vocab"]["source"]["tokens"]
assert len(tokens) == 61 and tokens[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"] and tokens[-1] == "\n", tokens
assert c["config"]["vocab"] == "61", c["config"]
PY

# decoding needs the checkpoint only: --prompt, and one JSON line per prompt on stdin
transformer-decode lm.json --prompt 'the cat' --max-new-tokens 6 > gen.json || fail "decode exited $?"
python3 -c "
import json; g = json.load(open('gen.json'))
assert len(g['tokens']) == 6 and isinstance(g['text'], str), g" || fail "generation: $(cat gen.json)"
[[ "$(printf 'the cat\nnaïve café\n' | transformer-decode lm.json --max-new-tokens 3 | wc -l)" == 2 ]] ||
  fail "two prompts on stdin did not give two lines"

# on a terminal (a pseudo-terminal here) the text is written as produced: the prompt, then what the JSON's text says
python3 - <<'PY' || fail "streaming to a terminal"
import json, os, pty, subprocess
cmd = ["transformer-decode", "lm.json", "--prompt", "the cat", "--max-new-tokens", "12"]
m, s = pty.openpty()
p = subprocess.Popen(cmd, stdout=s)
os.close(s)
out = b""
while True:
    try:
        d = os.read(m, 1024)
    except OSError:
        break
    if not d:
        break
    out += d
assert p.wait() == 0
text = out.decode().replace("\r\n", "\n")
want = "the cat" + json.loads(subprocess.run(cmd, capture_output=True, check=True).stdout)["text"] + "\n"
assert text == want, (text, want)
PY

# exact resume with dropout: 6 straight steps equal 3 + 3 resumed (the options and the model from the checkpoint)
nowall() { sed 's/"tokens_per_s":[^,}]*,\{0,1\}//' "$@"; }
seq2seq-train "${common[@]}" --vocab-size 60 --dropout 0.1 --steps 6 --log-every 1 --save e.json --metrics e.jsonl \
  > /dev/null || fail "straight run exited $?"
seq2seq-train "${common[@]}" --vocab-size 60 --dropout 0.1 --steps 3 --log-every 1 --save h.json --metrics r.jsonl \
  > /dev/null || fail "first half exited $?"
seq2seq-train --resume h.json --steps 6 --log-every 1 --save h.json --metrics r.jsonl --threads 1 > /dev/null ||
  fail "second half exited $?"
[[ "$(nowall e.jsonl)" == "$(nowall r.jsonl)" ]] || fail "resumed metrics differ: $(diff <(nowall e.jsonl) <(nowall r.jsonl))"
python3 -c "
import json; a, b = json.load(open('e.json')), json.load(open('h.json'))
for k in ('spm', 'vocab', 'decoder', 'embed', 'output'): assert a[k] == b[k], k" || fail "resumed checkpoint differs"

# the model as a .model file (the checkpoint's base64): the same one is accepted, another refused naming both
seq2seq-train "${common[@]}" --vocab-size 50 --steps 1 --save other.json > /dev/null || fail "other run exited $?"
for name in lm other; do
  python3 -c "import base64, json, sys; sys.stdout.buffer.write(base64.b64decode(json.load(open('$name.json'))['spm']['source']))" \
    > "$name.model"
done
transformer-decode lm.json --spm-model lm.model --prompt 'the' --max-new-tokens 2 > /dev/null ||
  fail "decode with the checkpoint's own --spm-model exited $?"
expect_error 1 "the SentencePiece model of other.model differs from the one of lm.json (60 pieces in lm.json, 50 in other.model)" \
  transformer-decode lm.json --spm-model other.model --prompt 'the'
expect_error 1 "the SentencePiece model of other.model differs from the one of h.json" \
  seq2seq-train --resume h.json --spm-model other.model --steps 8 --save h2.json
seq2seq-train "${common[@]}" --spm-model lm.model --steps 1 --save f.json > /dev/null || fail "--spm-model run exited $?"
python3 -c "import json; assert json.load(open('f.json'))['spm'] == json.load(open('lm.json'))['spm']" ||
  fail "--spm-model did not store the model given"
expect_error 2 "--vocab-size 70 disagrees with lm.model, a SentencePiece model of 60 pieces" \
  seq2seq-train "${common[@]}" --spm-model lm.model --vocab-size 70 --steps 1 --save f.json
expect_error 2 "--spm-type goes with training a SentencePiece model, not with --spm-model" \
  seq2seq-train "${common[@]}" --spm-model lm.model --spm-type bpe --steps 1 --save f.json
expect_error 2 "--spm-model: plain.json does not use SentencePiece (its tokenizer is char)" \
  bash -c 'seq2seq-train --model transformer-lm --train valid.txt --context 4 --layers 1 --d-model 8 --heads 2 \
    --ff 8 --steps 1 --save plain.json > /dev/null && transformer-decode plain.json --spm-model lm.model --prompt the'

# a recurrent model and a BPE model
seq2seq-train --model lstm-lm --train train.txt --tokenizer spm --spm-type bpe --vocab-size 80 --context 8 \
  --hidden 16 --embed 16 --batch 2 --steps 3 --save r.json > /dev/null || fail "lstm-lm with bpe exited $?"
transformer-decode r.json --prompt 'the dog' --max-new-tokens 3 > /dev/null || fail "lstm-lm decode exited $?"

# refusals
expect_error 1 "--vocab-size 5000 is too large for train.txt: SentencePiece finds at most" \
  seq2seq-train "${common[@]}" --vocab-size 5000 --steps 1 --save x.json
expect_error 1 "--vocab-size 9 is too small for train.txt" seq2seq-train "${common[@]}" --vocab-size 9 --steps 1 --save x.json
expect_error 2 "--vocab-size 4 with --tokenizer spm: a SentencePiece model's is in [8, 1048576]" \
  seq2seq-train "${common[@]}" --vocab-size 4 --steps 1 --save x.json
expect_error 2 "--tokenizer spm needs --vocab-size N" seq2seq-train "${common[@]}" --steps 1 --save x.json
expect_error 2 "--vocab-size goes with --tokenizer spm" \
  seq2seq-train "${model[@]}" --train train.txt --vocab-size 60 --steps 1 --save x.json
expect_error 2 "--tokenizer spm needs --vocab-size N (a SentencePiece model of N pieces trained on --train's sources)" \
  seq2seq-train --model lstm --train pairs.tsv --tokenizer spm --steps 1 --save x.json
expect_error 2 "--spm-sentences 50: SentencePiece samples at least 1000 lines" \
  seq2seq-train "${common[@]}" --vocab-size 60 --spm-sentences 50 --steps 1 --save x.json
printf 'good line\nbad \xc3( here\n' > bad.txt
expect_error 1 "bad.txt: line 2: invalid UTF-8 at byte 5 of the line, byte offset 14 of the file" \
  seq2seq-train "${model[@]}" --train bad.txt --tokenizer spm --vocab-size 20 --steps 1 --save x.json
[[ ! -e x.json ]] || fail "a refused run wrote x.json"

# a file of more lines than --spm-sentences: SentencePiece reads a sample of them, and says so
python3 -c "print('\n'.join('line %d of the big file, with some words' % i for i in range(1500)))" > big.txt
seq2seq-train "${model[@]}" --train big.txt --tokenizer spm --vocab-size 40 --spm-sentences 1000 --steps 1 \
  --save big.json > /dev/null 2> big.err || fail "big file run exited $?: $(cat big.err)"
grep -qF "SentencePiece trained on a random sample of 1000 of the 1500 lines of big.txt (--spm-sentences)" big.err ||
  fail "the sample was not said: $(cat big.err)"

finish spm_language_model

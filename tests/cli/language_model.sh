#!/usr/bin/env bash
# seq2seq-train --model transformer-lm|lstm-lm|gru-lm and transformer-decode --prompt: a tiny language model
# trains on a text file (summary with perplexity and bits per byte, the checkpoint's family and names), resumes
# exactly (dropout on; wherever the heap puts the buffers; the recurrent one mid-way through its streams, its
# state carried), generates the same tokens with and without the KV cache (the recurrent state) and with beam 1,
# and refuses bad text and misplaced options (exit 1 for bad input, 2 for usage). lstm-run runs the recurrent
# model's layers (CKPT#decoder).
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

for i in 1 2 3 4 5 6 7 8; do
  echo "the cat sat on the mat and the dog sat on the log; the cat ran to the dog and the dog ran to the cat."
done > train.txt
echo "the dog sat on the mat and the cat ran to the log." > valid.txt
model=(--model transformer-lm --context 16 --layers 2 --d-model 32 --heads 2 --ff 64 --batch 8 --lr 0.005 --threads 1)
common=("${model[@]}" --train train.txt --valid valid.txt)

seq2seq-train "${common[@]}" --steps 60 --log-every 20 --save lm.json --metrics lm.jsonl > sum.json ||
  fail "tiny run exited $?"
python3 - <<'PY' || fail "summary / checkpoint: $(cat sum.json)"
import json, math
s = json.load(open("sum.json"))
assert s["step"] == 60 and s["valid_loss"] < 2.0, s
assert abs(s["valid_ppl"] - math.exp(s["valid_loss"])) < 1e-6 * s["valid_ppl"], s
assert abs(s["valid_bpb"] - s["valid_loss"] / math.log(2)) < 1e-9, s  # ASCII: one byte per char token
assert s["valid_tokens"] == 50, s
lines = [json.loads(l) for l in open("lm.jsonl")]
assert [l["step"] for l in lines] == [20, 40, 60] and lines[-1]["valid_loss"] < lines[0]["valid_loss"], lines
c = json.load(open("lm.json"))
assert c["config"]["family"] == "transformer-lm" and c["config"]["norm_first"] == "true", c["config"]
assert c["config"]["max_positions"] == "16" and c["training"]["context"] == "16", c["training"]
assert "layers.1.self_attn.in_proj_weight" in c["decoder"] and "norm.weight" in c["decoder"], list(c["decoder"])
assert "weight" in c["embed"] and "weight" in c["pos_embed"] and "bias" in c["output"]
assert c["vocab"]["source"] == c["vocab"]["target"]
PY

# exact resume with dropout: 30 straight steps equal 15 + 15 resumed (the options come from the checkpoint)
nowall() { sed 's/"tokens_per_s":[^,}]*,\{0,1\}//' "$@"; }
seq2seq-train "${common[@]}" --dropout 0.1 --steps 30 --log-every 5 --save e.json --metrics e.jsonl > /dev/null ||
  fail "straight run exited $?"
seq2seq-train "${common[@]}" --dropout 0.1 --steps 15 --log-every 5 --save h.json --metrics r.jsonl > /dev/null ||
  fail "first half exited $?"
seq2seq-train --resume h.json --steps 30 --log-every 5 --save h.json --metrics r.jsonl --threads 1 > /dev/null ||
  fail "second half exited $?"
[[ "$(nowall e.jsonl)" == "$(nowall r.jsonl)" ]] || fail "resumed metrics differ: $(diff <(nowall e.jsonl) <(nowall r.jsonl))"
if [[ -n "${ATTNKIT_MISALIGN:-}" ]]; then
  ATTNKIT_MISALIGN_SEED=1 LD_PRELOAD="$ATTNKIT_MISALIGN" seq2seq-train "${common[@]}" --dropout 0.1 --steps 30 \
    --log-every 5 --save m.json --metrics m.jsonl > /dev/null || fail "misaligned run exited $?"
  [[ "$(nowall m.jsonl)" == "$(nowall e.jsonl)" ]] || fail "misaligned run: $(diff <(nowall e.jsonl) <(nowall m.jsonl))"
fi

# generation: 8 tokens; the cache changes nothing; beam 1 is greedy; one JSON line per prompt on stdin
tokens() { python3 -c "import json,sys; print(''.join(json.loads(l)['text'] + '|' for l in sys.stdin))"; }
greedy="$(transformer-decode lm.json --prompt 'the cat' --max-new-tokens 8 | tokens)"
[[ "$(transformer-decode lm.json --prompt 'the cat' --max-new-tokens 8 | python3 -c "import json; print(len(json.load(open(0))['tokens']))")" == 8 ]] ||
  fail "--max-new-tokens 8 did not give 8 tokens"
[[ "$(transformer-decode lm.json --prompt 'the cat' --max-new-tokens 8 --no-cache | tokens)" == "$greedy" ]] ||
  fail "--no-cache differs from the cache: $greedy"
[[ "$(transformer-decode lm.json --prompt 'the cat' --max-new-tokens 8 --strategy beam --beam 1 | tokens)" == "$greedy" ]] ||
  fail "beam 1 differs from greedy"
[[ "$(printf 'the cat\nthe dog sat\n' | transformer-decode lm.json --max-new-tokens 5 | wc -l)" == 2 ]] ||
  fail "two prompts on stdin did not give two lines"
s1="$(transformer-decode lm.json --prompt 'the' --max-new-tokens 8 --strategy sample --seed 4 | tokens)"
[[ "$(transformer-decode lm.json --prompt 'the' --max-new-tokens 8 --strategy sample --seed 4 | tokens)" == "$s1" ]] ||
  fail "sampling with one seed is not repeatable"

# on a terminal (a pseudo-terminal here), greedy text is written as produced: the prompt, then the tokens, as text
python3 - <<'PY' || fail "streaming to a terminal"
import os, pty, subprocess
m, s = pty.openpty()
p = subprocess.Popen(["transformer-decode", "lm.json", "--prompt", "the cat", "--max-new-tokens", "8"], stdout=s)
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
assert text.startswith("the cat") and text.endswith("\n") and len(text) == len("the cat") + 8 + 1, repr(text)
PY

# the recurrent language model: truncated BPTT over 8 streams, exact resume mid-way, the state as the cache
rnn=(--model lstm-lm --train train.txt --valid valid.txt --context 10 --layers 2 --hidden 24 --embed 16 --batch 8
     --lr 0.01 --threads 1 --dropout 0.1 --log-every 4)
seq2seq-train "${rnn[@]}" --steps 16 --save re.json --metrics re.jsonl > /dev/null || fail "lstm-lm run exited $?"
seq2seq-train "${rnn[@]}" --steps 8 --save rh.json --metrics rr.jsonl > /dev/null || fail "lstm-lm first half exited $?"
seq2seq-train --resume rh.json --steps 16 --log-every 4 --save rh.json --metrics rr.jsonl --threads 1 > /dev/null ||
  fail "lstm-lm second half exited $?"
[[ "$(nowall re.jsonl)" == "$(nowall rr.jsonl)" ]] || fail "lstm-lm resumed metrics differ: $(diff <(nowall re.jsonl) <(nowall rr.jsonl))"
grep -q '"family":"recurrent-lm"' re.json && grep -q '"cell":"lstm"' re.json || fail "lstm-lm config: $(head -c 300 re.json)"
r1="$(transformer-decode re.json --prompt 'the cat' --max-new-tokens 30 | tokens)"
[[ "$(transformer-decode re.json --prompt 'the cat' --max-new-tokens 30 --no-cache | tokens)" == "$r1" ]] ||
  fail "lstm-lm: --no-cache differs"
[[ "$(transformer-decode re.json --prompt 'the cat' --max-new-tokens 30 --strategy beam --beam 1 | tokens)" == "$r1" ]] ||
  fail "lstm-lm: beam 1 differs from greedy"
tensor randn --shape 1x3x16 > seq.json
lstm-run seq.json --weights 're.json#decoder' > run.json || fail "lstm-run re.json#decoder exited $?"
python3 -c "import json; o = json.load(open('run.json'))['output']; assert len(o[0]) == 3 and len(o[0][0]) == 24" ||
  fail "lstm-run re.json#decoder: $(head -c 200 run.json)"
seq2seq-train --model gru-lm --train train.txt --context 8 --hidden 16 --embed 16 --tied --steps 3 --threads 1 \
  --save gru.json > /dev/null || fail "gru-lm --tied exited $?"
expect_error 2 "--tied needs --embed 8 equal to --hidden 16" seq2seq-train --model gru-lm --train train.txt --embed 8 --hidden 16 --tied --steps 1 --save x.json
expect_error 2 "--ensemble goes with encoder-decoders; lm.json is a transformer-lm model" transformer-decode lm.json --prompt ab --ensemble lm.json
expect_error 2 "--maxi-batch does nothing with --model gru-lm" seq2seq-train --model gru-lm --train train.txt --maxi-batch 10 --steps 1 --save x.json
expect_error 2 "--d-model does nothing with --model rnn-lm" seq2seq-train --model rnn-lm --train train.txt --d-model 8 --steps 1 --save x.json
expect_error 1 "streams of 200 tokens need at least 1601" seq2seq-train --model lstm-lm --train train.txt --context 200 --batch 8 --steps 1 --save x.json

# bad text and misplaced options
printf 'good line\nbad \xc3( line\n' > bad.txt
expect_error 1 "bad.txt: line 2: invalid UTF-8 at byte offset 14" seq2seq-train "${model[@]}" --train bad.txt --steps 1 --save x.json
seq2seq-train "${model[@]}" --train bad.txt --valid bad.txt --tokenizer byte --steps 1 --save b.json > /dev/null ||
  fail "--tokenizer byte refused bytes that are not UTF-8"
: > empty.txt
expect_error 1 "empty.txt: empty file" seq2seq-train "${model[@]}" --train empty.txt --steps 1 --save x.json
printf 'short' > short.txt
expect_error 1 "short.txt: 5 tokens, but a context of 16 needs at least 17" seq2seq-train "${model[@]}" --train short.txt --steps 1 --save x.json
expect_error 2 "--hidden does nothing with --model transformer-lm" seq2seq-train "${common[@]}" --hidden 8 --steps 1 --save x.json
expect_error 2 "a language model reads char, byte or spm tokens" seq2seq-train "${common[@]}" --tokenizer space --steps 1 --save x.json
expect_error 2 "--context goes with a language model" seq2seq-train --task copy --model lstm --context 8 --steps 1 --save x.json
# past the 16 learned positions each token reads the last 16 (said on stderr), the same with and without the cache
long="$(transformer-decode lm.json --prompt 'the cat' --max-new-tokens 20 2> long.err | tokens)" || fail "past the context: exit $?"
grep -q "7 prompt tokens and 20 new ones are more than the model's context of 16" long.err || fail "no window note: $(cat long.err)"
[[ "$(transformer-decode lm.json --prompt 'the cat' --max-new-tokens 20 --no-cache 2> /dev/null | tokens)" == "$long" ]] ||
  fail "past the context, --no-cache differs from the cache: $long"
[[ "${long:0:8}" == "${greedy:0:8}" ]] || fail "the first 8 tokens past 'the cat' changed: $long vs $greedy"
# --attention: row s is the newest token's attention over the prompt and the first s outputs (each row sums to
# one; past the context only the last 16 positions), the same with and without the cache, per layer and head
for args in "--max-new-tokens 5" "--max-new-tokens 5 --attention-layer 0 --attention-head 1" "--max-new-tokens 20"; do
  transformer-decode lm.json --prompt 'the cat' $args --attention > att.json 2> /dev/null || fail "--attention $args: exit $?"
  transformer-decode lm.json --prompt 'the cat' $args --attention --no-cache > att-nc.json 2> /dev/null ||
    fail "--attention --no-cache $args: exit $?"
  python3 - att.json att-nc.json <<'PY' || fail "--attention $args"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert a["tokens"] == b["tokens"], (a["tokens"], b["tokens"])
rows, S = a["attention"], 7
assert len(rows) == len(a["tokens"]) and all(len(r) == S + len(rows) - 1 for r in rows), [len(r) for r in rows]
for s, (r, q) in enumerate(zip(rows, b["attention"])):
    t = S + s
    assert abs(sum(r) - 1) < 1e-5 and all(x == 0 for x in r[t:]), (s, r)
    assert all(x == 0 for x in r[:max(0, t - 16)]), ("outside the window", s, r)
    assert max(abs(x - y) for x, y in zip(r, q)) < 1e-5, (s, r, q)
PY
done
expect_error 2 "--heatmap does not apply to a language model" transformer-decode lm.json --prompt 'the cat' --heatmap a.svg
expect_error 2 "--src does not apply to a language model" transformer-decode lm.json --src 'the cat'
expect_error 1 "empty source" transformer-decode lm.json --prompt ''
[[ ! -e x.json ]] || fail "a refused run wrote x.json: $(head -c 200 x.json)"
seq2seq-train --task copy --model lstm --hidden 8 --embed 8 --steps 1 --save s2s.json --threads 1 > /dev/null || fail "seq2seq run exited $?"
expect_error 2 "--prompt goes with a language model" transformer-decode s2s.json --prompt '1 2'
finish language_model

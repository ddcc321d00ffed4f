#!/usr/bin/env bash
# transformer-decode --precision bf16|int8 and --keep-fp32 on the Transformer family: a copy-task Transformer
# trained here to full exact match gives exactly its float32 outputs in int8 and bf16, greedy and beam (the
# summary of what was lowered on stderr); a Transformer language model generates in int8; a --keep-fp32
# pattern that matches keeps its matrices in float32 (the summary says how many), one that matches nothing
# is a usage error (exit 2, nothing on stdout).
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

# (no dropout, the Noam schedule: full exact match with every seed tried, 1 to 5; about 1 s of CPU)
seq2seq-train --task copy --vocab-size 5 --min-len 2 --max-len 4 --train-size 200 --valid-size 16 \
  --model transformer --layers 1 --d-model 32 --heads 2 --ff 64 --batch 32 --schedule noam --warmup 300 \
  --lr 0.005 --dropout 0 --threads 1 --steps 1000 --save t.json > sum.json || fail "seq2seq-train exited $?"
python3 -c "import json; s = json.load(open('sum.json')); assert s['exact_match'] == 1, s" ||
  fail "the copy Transformer did not learn its task: $(cat sum.json)"
printf '1 2\n3 4 0\n0 4 1 2\n2 4 1\n4 3\n1 1 1 1\n' > src.txt
d() { transformer-decode t.json --threads 1 "$@" < src.txt; }

# --- the copy Transformer: identical outputs in every precision, greedy and beam (the tokens; the scores differ)
toks() { jq -c '.tokens' "$1"; }
d > fp32.jsonl || fail "fp32 exited $?"
[[ "$(toks fp32.jsonl)" == "$(jq -R -c 'split(" ")' src.txt)" ]] ||
  fail "the float32 model does not copy: $(cat fp32.jsonl)"
d --strategy beam --beam 3 > fp32_beam.jsonl || fail "fp32 beam exited $?"
for p in int8 bf16; do
  d --precision "$p" > "$p.jsonl" 2> "$p.err" || fail "--precision $p exited $?"
  [[ "$(toks "$p.jsonl")" == "$(toks fp32.jsonl)" ]] || fail "$p greedy: $(paste fp32.jsonl "$p.jsonl")"
  # 1 + 1 layers: the encoder's 4 matrices, the decoder's 6, the output: 11 weight matrices
  grep -q "^transformer-decode: $p: 11 weight matrices, " "$p.err" || fail "$p summary: $(cat "$p.err")"
  d --precision "$p" --strategy beam --beam 3 > "${p}_beam.jsonl" 2> /dev/null || fail "$p beam exited $?"
  [[ "$(toks "${p}_beam.jsonl")" == "$(toks fp32_beam.jsonl)" ]] || fail "$p beam: $(paste fp32_beam.jsonl "${p}_beam.jsonl")"
  d --precision "$p" --no-cache > "${p}_nc.jsonl" 2> /dev/null || fail "$p --no-cache exited $?"
  [[ "$(toks "${p}_nc.jsonl")" == "$(toks fp32.jsonl)" ]] || fail "$p --no-cache: $(cat "${p}_nc.jsonl")"
done
# the float32 run says nothing about precision
d 2> fp32.err > /dev/null && [[ ! -s fp32.err ]] || fail "fp32 wrote on stderr: $(cat fp32.err)"

# --- --keep-fp32: a pattern that matches keeps those matrices; one that matches nothing is refused
d --precision int8 --keep-fp32 'decoder.*' 'output.*' > keep.jsonl 2> keep.err || fail "--keep-fp32 exited $?"
grep -q "int8: 11 weight matrices, .*; 7 kept in float32 (decoder\.\*, output\.\*)" keep.err ||
  fail "--keep-fp32 summary: $(cat keep.err)"
[[ "$(toks keep.jsonl)" == "$(toks fp32.jsonl)" ]] || fail "--keep-fp32 outputs: $(cat keep.jsonl)"
expect_error 2 "--keep-fp32 encoder.layers.9.*: no weight matrix of the model has a name it matches" \
  transformer-decode t.json --src '1 2' --precision int8 --keep-fp32 'encoder.layers.9.*'
expect_error 2 "encoder.layers.0.self_attn.in_proj_weight" \
  transformer-decode t.json --src '1 2' --precision bf16 --keep-fp32 'nothing'
expect_error 2 "--keep-fp32 goes with --precision bf16 or int8" transformer-decode t.json --src '1 2' --keep-fp32 'output.*'
expect_error 2 "--precision" transformer-decode t.json --src '1 2' --precision fp16

# --- a Transformer language model generates under int8, with the cache and without
for i in 1 2 3 4 5 6; do echo "the cat sat on the mat and the dog sat on the log."; done > train.txt
seq2seq-train --model transformer-lm --context 16 --layers 1 --d-model 16 --heads 2 --ff 32 --batch 8 --lr 0.005 \
  --threads 1 --train train.txt --steps 20 --save lm.json > /dev/null || fail "seq2seq-train (lm) exited $?"
transformer-decode lm.json --threads 1 --prompt 'the ' --max-new-tokens 12 --precision int8 -o gen.jsonl 2> lm.err ||
  fail "lm int8 exited $?"
jq -e '(.tokens | length) == 12' gen.jsonl > /dev/null || fail "lm int8 output: $(cat gen.jsonl)"
grep -q "^transformer-decode: int8: 5 weight matrices" lm.err || fail "lm summary: $(cat lm.err)"
transformer-decode lm.json --threads 1 --prompt 'the ' --max-new-tokens 12 --precision int8 --no-cache \
  -o gen_nc.jsonl 2> /dev/null || fail "lm int8 --no-cache exited $?"
[[ "$(toks gen.jsonl)" == "$(toks gen_nc.jsonl)" ]] || fail "lm int8: cache and no cache differ"
finish precision

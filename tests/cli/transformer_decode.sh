#!/usr/bin/env bash
# transformer-decode end to end on a tiny recurrent checkpoint trained here: greedy == beam 1, --no-cache ==
# cache, n-best sorted, the same seed the same samples, NDJSON and text input, attention and heatmap,
# streaming (a batch's result is out before the input ends), ensembles and rescoring, and the error contract
# (exit 1 bad input, 2 usage; message on stderr, nothing on stdout).
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

seq2seq-train --task reverse --vocab-size 6 --min-len 2 --max-len 5 --train-size 64 --valid-size 8 --model lstm \
  --attention dot --hidden 16 --embed 8 --batch 16 --lr 0.02 --threads 1 --steps 60 --save m.json > /dev/null ||
  fail "seq2seq-train exited $?"
printf '1 2 3\n4 0 5 1\n2 2\n5 4 3 2 1\n' > src.txt
d() { transformer-decode m.json --threads 1 --max-len 8 "$@"; }

# --- greedy == beam 1 (tokens and scores), and --no-cache == cache, for every strategy
d < src.txt > greedy.jsonl || fail "greedy exited $?"
[[ $(wc -l < greedy.jsonl) == 4 ]] || fail "greedy: $(cat greedy.jsonl)"
d --strategy beam --beam 1 < src.txt > beam1.jsonl || fail "beam 1 exited $?"
cmp -s greedy.jsonl beam1.jsonl || fail "beam 1 differs from greedy: $(paste greedy.jsonl beam1.jsonl)"
d --min-len 3 < src.txt > g3.jsonl && d --strategy beam --beam 1 --min-len 3 < src.txt > b3.jsonl || fail "min-len runs"
cmp -s g3.jsonl b3.jsonl || fail "beam 1 differs from greedy with --min-len 3"
jq -e 'select((.tokens | length) < 3)' g3.jsonl > /dev/null && fail "--min-len 3 gave a shorter output: $(cat g3.jsonl)"
for s in "" "--strategy beam --beam 3 --n-best 3" "--strategy sample --n-best 2 --seed 3"; do
  # shellcheck disable=SC2086
  d $s < src.txt > c.jsonl && d $s --no-cache < src.txt > n.jsonl || fail "$s: exited $?"
  jq -c '[.tokens, (.score * 1e4 | round)]' c.jsonl > c.txt; jq -c '[.tokens, (.score * 1e4 | round)]' n.jsonl > n.txt
  cmp -s c.txt n.txt || fail "--no-cache differs ($s): $(paste c.txt n.txt)"
done

# --- n-best: K hypotheses sorted by score (and by the normalized score with a length penalty), the best first
d --strategy beam --beam 4 --n-best 4 < src.txt > nb.jsonl || fail "n-best exited $?"
jq -e '(.n_best | length) == 4 and ([.n_best[].score] | . == (sort | reverse)) and .n_best[0].tokens == .tokens' \
  nb.jsonl > /dev/null || fail "n-best not 4 sorted hypotheses: $(cat nb.jsonl)"
d --strategy beam --beam 4 --n-best 4 --length-penalty 1 < src.txt > lp.jsonl || fail "length penalty exited $?"
jq -e '([.n_best[].normalized] | . == (sort | reverse)) and (.normalized != null)' lp.jsonl > /dev/null ||
  fail "length penalty: not sorted by normalized: $(cat lp.jsonl)"

# --- sampling: the same seed gives the same samples, whatever the batch; another seed other samples
d --strategy sample --n-best 3 --seed 11 --temperature 2 < src.txt > s1.jsonl || fail "sample exited $?"
d --strategy sample --n-best 3 --seed 11 --temperature 2 --batch 1 < src.txt > s2.jsonl || fail "sample 2 exited $?"
# (the scores may differ in the last bits: a batch pads its sources, and the GEMMs' shapes change)
key() { jq -c '[.n_best[] | [.tokens, (.score * 1e3 | round)]]' "$1"; }
[[ "$(key s1.jsonl)" == "$(key s2.jsonl)" ]] || fail "same seed, other samples (batch 1 vs 32)"
d --strategy sample --n-best 3 --seed 12 --temperature 2 < src.txt > s3.jsonl || fail "sample 3 exited $?"
cmp -s s1.jsonl s3.jsonl && fail "seeds 11 and 12 gave the same samples"
d --strategy sample --top-k 1 < src.txt > k1.jsonl || fail "top-k 1 exited $?"
cmp -s greedy.jsonl k1.jsonl || fail "sampling with --top-k 1 differs from greedy"

# --- <pad>, <bos> and <unk> are never output: a barely trained model, 40 samples at a hot temperature
seq2seq-train --task reverse --vocab-size 6 --min-len 2 --max-len 5 --train-size 64 --valid-size 8 --model lstm \
  --attention dot --hidden 16 --embed 8 --batch 16 --lr 0.02 --threads 1 --steps 3 --save raw.json > /dev/null ||
  fail "seq2seq-train (3 steps) exited $?"
for s in "--strategy sample --n-best 40 --temperature 3" "--strategy beam --beam 8 --n-best 8" ""; do
  # shellcheck disable=SC2086
  lacks '<pad>|<bos>|<unk>' "a special token was output ($s)" transformer-decode raw.json --threads 1 $s < src.txt
done

# --- input forms: --src, NDJSON records; attention rows and the heatmap
# (a source alone is a batch of one: its scores may differ from the padded batch's in the last bits, as above)
first="$(head -1 greedy.jsonl | jq -c '[.tokens, (.score * 1e4 | round)]')"
[[ "$(d --src '1 2 3' | jq -c '[.tokens, (.score * 1e4 | round)]')" == "$first" ]] || fail "--src differs from the first line"
[[ "$(echo '{"src": "1 2 3", "id": 7}' | d | jq -c '[.tokens, (.score * 1e4 | round)]')" == "$first" ]] ||
  fail "NDJSON input differs"
d --src '1 2 3' --attention --heatmap a.svg > att.json || fail "attention exited $?"
jq -e '(.attention | length) == (.tokens | length) + 1 and all(.attention[]; length == 3 and (add - 1 | fabs) < 1e-4)' \
  att.json > /dev/null || fail "attention rows: $(cat att.json)"
grep -q '<svg' a.svg && grep -q '>1<' a.svg || fail "heatmap lacks the svg or the source labels"
printf '1 2\n3 4\n' | d --heatmap 'h-{n}.svg' > /dev/null && [[ -s h-1.svg && -s h-2.svg ]] || fail "heatmap {n}"

# --- streaming: with --batch 1 the first result is written before the input ends
mkfifo in.fifo
d --batch 1 < in.fifo > stream.jsonl 2> stream.err &
pid=$!
exec 3> in.fifo
echo '1 2 3' >&3
for _ in $(seq 1 100); do [[ -s stream.jsonl ]] && break; sleep 0.05; done
[[ -s stream.jsonl ]] || fail "no result before the end of the input"
echo '2 2' >&3
exec 3>&-
wait "$pid" || fail "streaming run exited $?"
[[ $(wc -l < stream.jsonl) == 2 ]] || fail "streaming: $(cat stream.jsonl)"

# --- unknown tokens: mapped to <unk>, counted in a warning
d --src '1 42 2 77' > unk.json 2> unk.err || fail "unknown tokens exited $?"
grep -q '2 unknown source token(s) mapped to <unk> (in 1 of 1' unk.err || fail "warning: $(cat unk.err)"

# --- a model given as config + state_dict (the PyTorch export form) decodes as its checkpoint does
jq '.config + {family: "recurrent", vocab: .vocab, src_tokenizer: "ids", tgt_tokenizer: "ids"}' m.json > cfg.json
jq '[paths(type == "array" and (.[0] | type) != "string") as $p | select(($p | length) == 2 and
     ($p[0] | IN("src_embed", "encoder", "tgt_embed", "decoder", "attention", "combine", "output")))
     | {key: ($p | join(".")), value: getpath($p)}] | from_entries' m.json > sd.json
transformer-decode cfg.json --weights sd.json --threads 1 --max-len 8 < src.txt > ex.jsonl || fail "exported exited $?"
cmp -s ex.jsonl greedy.jsonl || fail "config + state_dict decodes differently: $(paste ex.jsonl greedy.jsonl)"
jq '. + {"extra.weight": [1, 2]}' sd.json > extra.json
expect_error 1 "extra.weight is not a parameter" transformer-decode cfg.json --weights extra.json --src '1 2'
jq 'del(.["output.bias"])' sd.json > missing.json
expect_error 1 "output.bias is missing" transformer-decode cfg.json --weights missing.json --src '1 2'

# --- the error contract
echo '{"w": [1, 2]}' > notck.json
expect_error 1 "not an attnkit seq2seq checkpoint" transformer-decode notck.json --src '1 2'
expect_error 1 "no_such.json" transformer-decode no_such.json --src '1 2'
sed 's/"hidden":"16"/"hidden":"17"/' m.json > bad_hidden.json
expect_error 1 "bad_hidden.json" transformer-decode bad_hidden.json --src '1 2'
sed 's/"tgt_vocab":"10"/"tgt_vocab":"16000000"/; s/"hidden":"16"/"hidden":"65536"/' m.json > huge.json
expect_error 1 "but the config says" transformer-decode huge.json --src '1 2'  # refused before allocating
sed 's/"cell":"lstm"/"cell":"gru"/' m.json > bad_cell.json
expect_error 1 "bad_cell.json" transformer-decode bad_cell.json --src '1 2'
sed 's/"attention":"dot"/"family":"conv","attention":"dot"/' m.json > fam.json
expect_error 1 'model family "conv"' transformer-decode fam.json --src '1 2'
expect_error 1 "empty source" transformer-decode m.json --src ''
printf '1 2\n\n3\n' > blank.txt  # a blank line: an empty result in its place, the others decoded
transformer-decode m.json < blank.txt > blank.jsonl || fail "blank line exited $?"
jq -e -s 'length == 3 and .[1] == {tokens: [], text: "", empty: true} and (.[0].tokens | length) > 0 and
  (.[2].tokens | length) > 0' blank.jsonl > /dev/null || fail "blank line: $(cat blank.jsonl)"
echo '{"source": "1 2"}' > wrong.jsonl
expect_error 1 'string "src"' transformer-decode m.json < wrong.jsonl
expect_error 2 "--beam" transformer-decode m.json --src '1 2' --strategy beam --beam 0
expect_error 2 "--top-p" transformer-decode m.json --src '1 2' --strategy sample --top-p 1.5
expect_error 2 "--top-k goes with --strategy sample" transformer-decode m.json --src '1 2' --strategy beam --top-k 3
expect_error 2 "--beam goes with --strategy beam" transformer-decode m.json --src '1 2' --beam 3
expect_error 2 "--n-best 5 is more than --beam 2" transformer-decode m.json --src '1 2' --strategy beam --beam 2 --n-best 5
expect_error 2 "--attention-head goes with" transformer-decode m.json --src '1 2' --attention-head 0
expect_error 1 "attention head 3" transformer-decode m.json --src '1 2' --attention --attention-head 3
expect_error 2 "takes one source" transformer-decode m.json --heatmap one.svg < src.txt -o res.jsonl
[[ ! -e res.jsonl ]] || fail "-o file left behind by a failed run"
expect_error 2 "takes one source" transformer-decode m.json --heatmap one.svg < src.txt
[[ ! -e one.svg ]] || fail "--heatmap one.svg written although a second source was refused"
printf '1 2\n3 4\n' | d --heatmap 'x{n}-{n}.svg' > /dev/null && [[ -s x1-1.svg && -s x2-2.svg ]] ||
  fail "heatmap: every {n} is not replaced: $(ls)"
printf '1 2\n3 4\n5 1\n' > late.txt
seq 9000 | sed 's/.*/1/' | paste -sd' ' >> late.txt
expect_error 1 "line 4: the source has 9000 tokens, more than the maximum 4096" \
  transformer-decode m.json --batch 1 --heatmap 'late-{n}.svg' -o late.jsonl < late.txt
[[ ! -e late-1.svg && ! -e late.jsonl ]] || fail "a failed -o run left its heatmaps: $(ls late*)"

# --- weights that are not finite numbers are refused, naming the tensor
jq '.output.bias[1] = "NaN"' m.json > nan.json
expect_error 1 "weight output.bias has NaN at [1]" transformer-decode nan.json --src '1 2'
jq '.["output.bias"][0] = "-Infinity"' sd.json > inf.json
expect_error 1 "weight output.bias has -Infinity at [0]" transformer-decode cfg.json --weights inf.json --src '1 2'

# --- a checkpoint is read whole: a missing config field, a tensor the model does not have
jq 'del(.config.layers)' m.json > nolayers.json
expect_error 1 'missing config "layers"' transformer-decode nolayers.json --src '1 2'
jq 'del(.config.attention_style)' m.json > nostyle.json
expect_error 1 'config field "attention_style" is missing' transformer-decode nostyle.json --src '1 2'
jq '.output.extra = [1, 2]' m.json > extra_ck.json
expect_error 1 "tensor output.extra is not a parameter" transformer-decode extra_ck.json --src '1 2'
jq '.config.attention = "none"' m.json > noatt.json
expect_error 1 "is not a parameter" transformer-decode noatt.json --src '1 2'
jq 'del(.optimizer["output.bias"])' m.json > noopt.json  # resumed training: every parameter has its state
expect_error 1 "optimizer: parameter output.bias has no state" seq2seq-train --task reverse --vocab-size 6 \
  --min-len 2 --max-len 5 --train-size 64 --valid-size 8 --batch 16 --lr 0.02 --threads 1 --steps 61 \
  --resume noopt.json --save resumed.json

# --- limits, before any work: bounds named in the messages
expect_error 2 "--beam 1000000 is more than the maximum 256" d --src '1 2' --strategy beam --beam 1000000
expect_error 2 "--n-best 100000 is more than the maximum 256" d --src '1 2' --strategy sample --n-best 100000
expect_error 2 "--max-len 1000000000 is more than the maximum 4096" transformer-decode m.json --src '1 2' --max-len 1000000000
expect_error 2 "--min-len 1000000 is more than the maximum 4096" transformer-decode m.json --src '1 2' --min-len 1000000
expect_error 2 "--min-len 9 is more than --max-len 8" d --src '1 2' --min-len 9
transformer-decode m.json --threads 1 --src '1 2' --min-len 20 > long.json || fail "--min-len 20 exited $?"
jq -e '(.tokens | length) >= 20' long.json > /dev/null || fail "--min-len 20 above the default max-len: $(cat long.json)"
seq 500000 | sed 's/.*/1/' | paste -sd' ' > big.txt  # 1 MB, 500,000 tokens
expect_error 1 "line 1: the source has 500000 tokens, more than the maximum 4096" transformer-decode m.json --input text < big.txt
for _ in $(seq 1 20); do cat src.txt; done > many.txt  # 80 sources x 256 rows x 4096 tokens, with attention
expect_error 1 "more than 1024 MB" transformer-decode m.json --strategy beam --beam 256 --max-len 4096 --batch 80 \
  --attention < many.txt

# --- interactive: a line written to a pipe is answered before the writer closes it (default --batch)
mkfifo live.fifo
timeout 60 transformer-decode m.json --threads 1 < live.fifo > live.jsonl 2> live.err &
pid=$!
exec 4> live.fifo
echo '1 2 3' >&4
for _ in $(seq 1 400); do [[ -s live.jsonl ]] && break; sleep 0.05; done
[[ -s live.jsonl ]] || fail "a line on a pipe was not answered within 20 s while the writer stayed open"
echo '' >&4
exec 4>&-
wait "$pid" || fail "interactive run exited $?: $(cat live.err)"
[[ $(wc -l < live.jsonl) == 2 ]] && [[ "$(tail -1 live.jsonl)" == '{"tokens":[],"text":"","empty":true}' ]] ||
  fail "interactive: $(cat live.jsonl)"

# --- the --help examples run as written
mkdir help && (cd help && transformer-decode --help | sed -n '/^Examples:/,$p' | tail -n +2 | sed 's/^  //' > ex.sh &&
  [[ $(wc -l < ex.sh) -ge 5 ]] && bash -euo pipefail ex.sh > ex.out 2> ex.err && [[ -s align.svg ]]) ||
  fail "--help examples: $(cat help/ex.err 2>/dev/null)"
# --- --ensemble: a model with itself decodes as alone (tokens, scores within rounding); another model on the same
# vocabulary joins it; other vocabularies and combinations without a meaning are refused
for s in "" "--strategy beam --beam 3 --n-best 2"; do
  # shellcheck disable=SC2086
  d $s < src.txt > alone.jsonl && d $s --ensemble m.json < src.txt > self.jsonl || fail "$s --ensemble m.json: exited $?"
  jq -c '[.tokens, (.score * 1e4 | round)]' alone.jsonl > a.txt; jq -c '[.tokens, (.score * 1e4 | round)]' self.jsonl > e.txt
  cmp -s a.txt e.txt || fail "a model ensembled with itself decodes otherwise ($s): $(paste a.txt e.txt)"
done
seq2seq-train --task reverse --vocab-size 6 --min-len 2 --max-len 5 --train-size 64 --valid-size 8 --model gru \
  --attention general --hidden 12 --embed 8 --batch 16 --lr 0.02 --threads 1 --steps 20 --seed 4 --save g.json > /dev/null ||
  fail "seq2seq-train (gru) exited $?"
d --ensemble g.json --attention < src.txt > ens.jsonl || fail "--ensemble g.json exited $?"
[[ $(jq -s 'length' ens.jsonl) == 4 ]] && jq -e '.attention | length > 0' ens.jsonl > /dev/null || fail "ensemble: $(cat ens.jsonl)"
seq2seq-train --task reverse --vocab-size 7 --min-len 2 --max-len 5 --train-size 64 --valid-size 8 --model gru \
  --hidden 8 --embed 4 --batch 16 --threads 1 --steps 2 --save v7.json > /dev/null || fail "seq2seq-train (7) exited $?"
expect_error 1 "ensemble: the source vocabularies differ: 10 tokens in m.json, 11 in v7.json" \
  transformer-decode m.json --src '1 2' --ensemble v7.json
expect_error 2 "--save-quantized writes one model: not with --ensemble" transformer-decode m.json --src '1 2' \
  --ensemble g.json --precision int8 --save-quantized q.safetensors

# --- --rescore: a model rescoring its own beam keeps its order (the combined score is its own score); a right-to-
# left model reranks the beam's hypotheses, best first, the n best of them written
b3() { d --strategy beam --beam 3 "$@" < src.txt; }
b3 --n-best 3 > beam.jsonl && b3 --n-best 3 --rescore m.json > self.jsonl || fail "--rescore m.json exited $?"
jq -c '[.n_best[] | .tokens]' beam.jsonl > a.txt; jq -c '[.n_best[] | .tokens]' self.jsonl > e.txt
cmp -s a.txt e.txt || fail "a model rescoring its own beam reorders it: $(paste a.txt e.txt)"
jq -e '[.n_best[] | (.normalized - .score) | fabs < 1e-5] | all' self.jsonl > /dev/null ||
  fail "self-rescored scores: $(cat self.jsonl)"
seq2seq-train --task reverse --vocab-size 6 --min-len 2 --max-len 5 --train-size 64 --valid-size 8 --model gru \
  --attention general --hidden 12 --embed 8 --batch 16 --lr 0.02 --threads 1 --steps 20 --seed 5 --right-left \
  --save rl.json > /dev/null || fail "seq2seq-train --right-left exited $?"
b3 --n-best 2 --rescore rl.json --rescore-inverse m.json --inverse-weight 0.5 > rescored.jsonl ||
  fail "--rescore rl.json exited $?"
python3 - <<'PY' || fail "rescored n-best: $(cat rescored.jsonl)"
import json
beam = [json.loads(l) for l in open("beam.jsonl")]
res = [json.loads(l) for l in open("rescored.jsonl")]
assert len(res) == len(beam) == 4
for b, r in zip(beam, res):
    assert len(r["n_best"]) == 2 and r["tokens"] == r["n_best"][0]["tokens"], r
    assert r["n_best"][0]["normalized"] >= r["n_best"][1]["normalized"], r
    scores = {tuple(h["tokens"]): h["score"] for h in b["n_best"]}
    for h in r["n_best"]:  # the beam's own hypotheses, with their search scores
        assert abs(scores[tuple(h["tokens"])] - h["score"]) < 1e-6, (b, r)
PY
# --rescore-union: the right-to-left model's beam joins; the union's best ranks at least as high as the beam's
# (the right-to-left model weighing 4: its own beam's best ones rank high)
b3 --n-best 2 --rescore rl.json --rescore-weight 4 > rescored4.jsonl || fail "--rescore-weight 4 exited $?"
b3 --n-best 2 --rescore rl.json --rescore-weight 4 --rescore-union > union.jsonl || fail "--rescore-union exited $?"
python3 - <<'PY' || fail "joined n-best: $(cat union.jsonl)"
import json
res = [json.loads(l) for l in open("rescored4.jsonl")]
uni = [json.loads(l) for l in open("union.jsonl")]
assert len(uni) == len(res) == 4
for r, u in zip(res, uni):
    assert len(u["n_best"]) == 2 and u["n_best"][0]["normalized"] >= u["n_best"][1]["normalized"], u
    assert u["n_best"][0]["normalized"] >= r["n_best"][0]["normalized"] - 1e-6, (r, u)
# somewhere a hypothesis the search's beam lacked ranks among the best two (else nothing joined)
beam = [json.loads(l) for l in open("beam.jsonl")]
assert any(tuple(h["tokens"]) not in {tuple(x["tokens"]) for x in b["n_best"]} for b, u in zip(beam, uni)
           for h in u["n_best"]), (beam, uni)
PY
b3 --n-best 3 --rescore m.json --rescore-union > self-union.jsonl || fail "--rescore m.json --rescore-union exited $?"
jq -c '[.n_best[] | .tokens]' self-union.jsonl > u.txt
cmp -s a.txt u.txt || fail "a model's own beam joined to its beam reorders it: $(paste a.txt u.txt)"
expect_error 2 "--rescore-union goes with --rescore" transformer-decode m.json --src '1 2' --strategy beam --rescore-union
b3 --n-best 3 --rescore rl.json --rescore-weight 0 > rweight0.jsonl || fail "--rescore-weight 0 exited $?"
jq -c '[.n_best[] | .tokens]' rweight0.jsonl > w.txt
cmp -s a.txt w.txt || fail "a rescoring model of weight 0 reorders the beam: $(paste a.txt w.txt)"
expect_error 2 "--rescore-weight goes with --rescore" transformer-decode m.json --src '1 2' --strategy beam --rescore-weight 2
expect_error 2 "--attention shows the search model's attention: not with --rescore-union" transformer-decode m.json \
  --src '1 2' --strategy beam --rescore rl.json --rescore-union --attention
expect_error 2 "--rescore goes with --strategy beam" transformer-decode m.json --src '1 2' --rescore rl.json
expect_error 2 "--inverse-weight goes with --rescore-inverse" transformer-decode m.json --src '1 2' --strategy beam \
  --inverse-weight 2
expect_error 1 "rescoring: the source vocabularies differ: 10 tokens in m.json, 11 in v7.json" \
  transformer-decode m.json --src '1 2' --strategy beam --rescore v7.json
expect_error 2 "--save-quantized writes one model: not with --rescore" transformer-decode m.json --src '1 2' \
  --strategy beam --rescore rl.json --precision int8 --save-quantized q.safetensors

finish transformer_decode

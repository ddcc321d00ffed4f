#!/usr/bin/env bash
# seq2seq-train end to end: a tiny run that learns (summary fields, checkpoint, metrics lines), resume up to
# --steps (and its equality with an uninterrupted run), the checkpoint's encoder through lstm-run, and the
# error contract (exit 1 bad input, 2 usage; message on stderr, nothing on stdout).
set -euo pipefail
fx="$ATTNKIT_SOURCE/tests/fixtures/data"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

num() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }
common=(--task reverse --vocab-size 5 --min-len 2 --max-len 4 --train-size 64 --valid-size 16 --model lstm
        --attention dot --hidden 24 --embed 12 --batch 16 --lr 0.02 --threads 1 --log-every 50)

# --- a tiny run learns: 250 steps
seq2seq-train "${common[@]}" --steps 250 --save m.json --metrics m.jsonl > sum.json || fail "tiny run exited $?"
[[ "$(num sum.json step)" == 250 ]] || fail "summary step: $(cat sum.json)"
python3 - <<'PY' || fail "summary / metrics: $(cat sum.json)"
import json
s = json.load(open("sum.json"))
for k in ("train_loss", "valid_loss", "token_accuracy", "exact_match", "parameters", "checkpoint"):
    assert k in s, k
assert s["train_loss"] < 0.3, s
assert s["token_accuracy"] > 0.9, s
assert s["exact_match"] > 0.5, s
lines = [json.loads(l) for l in open("m.jsonl")]
assert [l["step"] for l in lines] == [50, 100, 150, 200, 250], lines
assert lines[-1]["loss"] < lines[0]["loss"], lines
for k in ("epoch", "lr", "grad_norm", "tokens_per_s", "valid_loss", "token_accuracy", "exact_match"):
    assert k in lines[0], k
PY
grep -q '"format":"attnkit-seq2seq"' m.json || fail "checkpoint lacks its format"

# --- resume continues up to --steps and gives the uninterrupted run's metrics, bit for bit (tokens/s aside):
#     GRU with additive attention, hidden 19, the model whose gradients once depended on buffer alignment
rcommon=(--task reverse --vocab-size 13 --min-len 3 --max-len 11 --train-size 100 --valid-size 20 --batch 16
         --lr 0.01 --log-every 10 --model gru --attention additive --hidden 19 --embed 9 --threads 1)
nowall() { sed 's/"tokens_per_s":[^,}]*,\{0,1\}//' "$@"; }  # the metrics without the wall-clock field
seq2seq-train "${rcommon[@]}" --steps 60 --save u.json --metrics u.jsonl > /dev/null || fail "uninterrupted run exited $?"
seq2seq-train "${rcommon[@]}" --steps 25 --save half.json --metrics r.jsonl > /dev/null || fail "first half exited $?"
seq2seq-train "${rcommon[@]}" --steps 60 --resume half.json --save full.json --metrics r.jsonl > rsum.json ||
  fail "resume exited $?"
[[ "$(num rsum.json start_step)" == 25 && "$(num rsum.json step)" == 60 ]] || fail "resume summary: $(cat rsum.json)"
# r.jsonl has one more line, step 25, the end of the first part
[[ "$(nowall u.jsonl)" == "$(nowall r.jsonl | grep -v '"step":25,')" && "$(wc -l < u.jsonl)" == 6 ]] ||
  fail "the resumed run's metrics differ from the uninterrupted run's: $(diff <(nowall u.jsonl) <(nowall r.jsonl))"
python3 - <<'PY' || fail "resumed checkpoint differs from the uninterrupted one"
import json
u = json.load(open("u.json")); f = json.load(open("full.json"))
for k in ("data_order", "step", "config", "vocab", "optimizer", "encoder", "decoder", "attention", "output"):
    assert u[k] == f[k], k
PY
# --- --matmul-precision bf16 (both operands of the products rounded to bfloat16, sums in float32): on a processor
#     with AVX512_BF16 it learns as float32 does but not to the same bits, the checkpoint records it, and a resumed
#     run multiplies as the first part did (the uninterrupted bf16 run's metrics, bit for bit); elsewhere refused
if grep -qw avx512_bf16 /proc/cpuinfo; then
  seq2seq-train "${rcommon[@]}" --steps 60 --matmul-precision bf16 --save b.json --metrics b.jsonl > /dev/null ||
    fail "bf16 run exited $?"
  seq2seq-train "${rcommon[@]}" --steps 25 --matmul-precision bf16 --save bhalf.json --metrics br.jsonl > /dev/null ||
    fail "bf16 first half exited $?"
  seq2seq-train "${rcommon[@]}" --steps 60 --resume bhalf.json --save bfull.json --metrics br.jsonl > /dev/null ||
    fail "bf16 resume exited $?"
  [[ "$(nowall b.jsonl)" == "$(nowall br.jsonl | grep -v '"step":25,')" ]] ||
    fail "the resumed bf16 run differs from the uninterrupted one: $(diff <(nowall b.jsonl) <(nowall br.jsonl))"
  python3 - <<'PY' || fail "bf16 against float32: $(tail -1 b.jsonl) $(tail -1 u.jsonl)"
import json
b = [json.loads(l) for l in open("b.jsonl")]; u = [json.loads(l) for l in open("u.jsonl")]
assert b[-1]["loss"] != u[-1]["loss"], "bf16 gave float32's bits"
assert abs(b[-1]["valid_loss"] - u[-1]["valid_loss"]) < 0.05 * u[-1]["valid_loss"], (b[-1], u[-1])
opts = json.load(open("bfull.json"))["training"]["options"]
assert opts["--matmul-precision"] == "bf16", opts
PY
  expect_error 2 "was trained with --matmul-precision bf16" \
    seq2seq-train "${rcommon[@]}" --steps 70 --resume bfull.json --matmul-precision float32 --save x.json
else
  expect_error 2 "--matmul-precision bf16: this processor has no AVX512_BF16" \
    seq2seq-train "${rcommon[@]}" --steps 5 --matmul-precision bf16 --save x.json
fi
expect_error 2 "--matmul-precision" seq2seq-train "${rcommon[@]}" --steps 5 --matmul-precision fp16 --save x.json

# --- a cosine schedule is as long as the run: resumed with the --steps its checkpoint's run had, nothing is said;
#     with another, the rates from the checkpoint's step on differ from that run's, and stderr says so with both
#     (a finished run resumed with a longer one: a warm restart, the rate climbing back from 0)
seq2seq-train "${rcommon[@]}" --schedule cosine --steps 40 --save-every 20 --keep-last 2 --save cos.json > /dev/null ||
  fail "cosine run exited $?"
seq2seq-train --resume cos.step20.json --steps 40 --threads 1 --save same.json > /dev/null 2> same.err ||
  fail "cosine resume exited $?"
! grep -q "cosine" same.err || fail "a resume with the run's own --steps said: $(cat same.err)"
seq2seq-train --resume cos.json --steps 60 --log-every 10 --threads 1 --save warm.json --metrics warm.jsonl > /dev/null 2> warm.err ||
  fail "warm restart exited $?"
grep -qF "the cosine schedule runs to step 60 (--steps) where the checkpoint's run had it end at step 40: the rate at step 40 is 0.0025 where the checkpoint's schedule gives 0 (a warm restart)" warm.err ||
  fail "the warm restart was not said: $(cat warm.err)"
python3 -c "
import json
lr = [json.loads(l)['lr'] for l in open('warm.jsonl')]
assert len(lr) == 2 and 0 < lr[1] < lr[0] <= 0.0025, lr" || fail "the restarted rates: $(cat warm.jsonl)"
seq2seq-train --resume cos.step20.json --steps 80 --threads 1 --save longer.json > /dev/null 2> longer.err ||
  fail "longer resume exited $?"
grep -qF "runs to step 80 (--steps) where the checkpoint's run had it end at step 40: the rate at step 20 is 0.00854 where the checkpoint's schedule gives 0.005" longer.err && ! grep -q "warm restart" longer.err ||
  fail "the longer schedule was not said: $(cat longer.err)"

# --- the same resume through binary checkpoints, chosen by extension: the first half saved as .safetensors,
#     resumed into .npz, is the JSON run bit for bit (tensor get converts the .npz back to the same JSON bytes)
seq2seq-train "${rcommon[@]}" --steps 25 --save half.safetensors > /dev/null || fail "first half (.safetensors) exited $?"
seq2seq-train "${rcommon[@]}" --steps 60 --resume half.safetensors --save full.npz > /dev/null ||
  fail "resume from .safetensors exited $?"
tensor get full.npz -o full_npz.json || fail "tensor get full.npz exited $?"
cmp -s full.json full_npz.json || fail "a run resumed from .safetensors differs from the JSON one"
python3 - <<'PY' || fail "half.safetensors is not a safetensors checkpoint"
import json, struct
b = open("half.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
assert h["encoder.weight_ih_l0"]["dtype"] == "F32" and h["encoder.weight_ih_l0"]["shape"] == [57, 9], h["encoder.weight_ih_l0"]
assert "optimizer.encoder.weight_ih_l0.exp_avg" in h, sorted(h)[:5]
meta = json.loads(h["__metadata__"]["attnkit_meta"])
assert meta["step"] == "25" and meta["encoder"]["weight_ih_l0"] is None and meta["format"] == "attnkit-seq2seq", meta["step"]
PY
# transformer-decode reads it as it reads the JSON form
transformer-decode half.safetensors --src "3 1 4" > dec_st.json || fail "decode .safetensors exited $?"
transformer-decode half.json --src "3 1 4" > dec_json.json || fail "decode .json exited $?"
cmp -s dec_st.json dec_json.json || fail "decoding the .safetensors checkpoint differs: $(cat dec_st.json dec_json.json)"
expect_error 1 "a checkpoint is a bundle, and .npy holds one tensor" seq2seq-train "${rcommon[@]}" --steps 5 --save x.npy
[[ ! -e x.npy ]] || fail "a refused --save x.npy left a file"

# the same bits wherever the heap puts the buffers (an LD_PRELOAD malloc that misaligns on purpose)
if [[ -n "${ATTNKIT_MISALIGN:-}" ]]; then
  [[ -f "$ATTNKIT_MISALIGN" ]] || fail "ATTNKIT_MISALIGN=$ATTNKIT_MISALIGN: no such library"
  for seed in 1 2; do
    ATTNKIT_MISALIGN_SEED=$seed LD_PRELOAD="$ATTNKIT_MISALIGN" seq2seq-train "${rcommon[@]}" --steps 30 \
      --save mis$seed.json --metrics mis$seed.jsonl > /dev/null || fail "misaligned run $seed exited $?"
  done
  [[ "$(nowall mis1.jsonl)" == "$(nowall mis2.jsonl)" && "$(nowall mis1.jsonl)" == "$(nowall u.jsonl | head -3)" ]] ||
    fail "the metrics depend on the heap's alignment: $(diff <(nowall mis1.jsonl) <(nowall mis2.jsonl))"
fi
# a checkpoint already at --steps is evaluated, and the run exits 0
seq2seq-train "${common[@]}" --steps 250 --resume m.json --save again.json > asum.json || fail "resume at end exited $?"
[[ "$(num asum.json step)" == 250 ]] || fail "resume at end: $(cat asum.json)"

# --- the checkpoint's encoder runs in lstm-run (ids as embeddings: any [N, T, 12] input)
tensor randn --shape 2,3,12 --seed 4 > in.json
lstm-run in.json --weights 'm.json#encoder' > enc.json || fail "lstm-run on the checkpoint's encoder exited $?"
grep -q '"h_n"' enc.json || fail "lstm-run output lacks h_n"

# --- files: TSV with a validation file
seq2seq-train --train "$fx/pairs.tsv" --valid "$fx/pairs.tsv" --model gru --attention additive --steps 5 \
  --hidden 8 --embed 4 --batch 2 --threads 1 --save f.json > fsum.json || fail "TSV run exited $?"
[[ "$(num fsum.json step)" == 5 ]] || fail "TSV run summary: $(cat fsum.json)"
# additive attention of its own size: stored in the config, kept on resume, another size refused
seq2seq-train --train "$fx/pairs.tsv" --model gru --attention additive --attention-dim 3 --steps 2 --hidden 8 \
  --embed 4 --batch 2 --threads 1 --save fa.json > /dev/null || fail "--attention-dim 3 run exited $?"
grep -q '"attention_dim": *"3"' fa.json || fail "the checkpoint's config lacks attention_dim 3"
seq2seq-train --resume fa.json --steps 3 --attention-dim 3 --threads 1 --save fa.json > /dev/null ||
  fail "resuming with the same --attention-dim exited $?"
expect_error 1 "the checkpoint's model is gru with attention additive of size 3, embed 4, hidden 8, 1 layer(s); it \
cannot continue as gru with attention additive of size 5" seq2seq-train --resume fa.json --steps 4 --attention-dim 5 \
  --save fa.json
expect_error 1 "f.json: the checkpoint's model is gru with attention additive of size 8, embed 4, hidden 8, 1 \
layer(s); it cannot continue as gru with attention additive of size 5" seq2seq-train --resume f.json --steps 6 \
  --attention-dim 5 --save f2.json
# a decoder of its own size: bridged from the encoder, kept on resume, decoded by seq2seq-eval
seq2seq-train --train "$fx/pairs.tsv" --model lstm --attention general --bidirectional --hidden 6 --decoder-hidden 5 \
  --steps 2 --embed 4 --batch 2 --threads 1 --save fd.json > /dev/null || fail "--decoder-hidden 5 run exited $?"
grep -q '"decoder_hidden": *"5"' fd.json || fail "the checkpoint's config lacks decoder_hidden 5"
seq2seq-eval fd.json "$fx/pairs.tsv" > fd_eval.json || fail "seq2seq-eval of a bridged model exited $?"
expect_error 1 "it cannot continue as lstm with attention general, embed 4, hidden 6, 1 layer(s), bidirectional, \
decoder 7" seq2seq-train --resume fd.json --steps 4 --decoder-hidden 7 --save fd.json
expect_error 2 "--decoder-hidden 5 differs from the encoder's output (12): the dot score needs them equal" \
  seq2seq-train --train "$fx/pairs.tsv" --model lstm --attention dot --bidirectional --hidden 6 --decoder-hidden 5 \
  --steps 2 --save x.json
expect_error 2 "--attention-dim goes with --attention additive" seq2seq-train --train "$fx/pairs.tsv" --model gru \
  --attention dot --attention-dim 3 --steps 2 --save x.json
expect_error 2 "--attention-dim does nothing with --model transformer" seq2seq-train --train "$fx/pairs.tsv" \
  --model transformer --attention-dim 3 --steps 2 --save x.json

# --- bad input: exit 1, the message, nothing on stdout, the checkpoint left as it was
cp m.json keep.json
expect_error 1 "bad.tsv:" seq2seq-train --train "$fx/bad.tsv" --model lstm --steps 1 --save x.json
expect_error 1 "empty.tsv" seq2seq-train --train "$fx/empty.tsv" --model lstm --steps 1 --save x.json
expect_error 1 "missing.tsv" seq2seq-train --train missing.tsv --model lstm --steps 1 --save x.json
expect_error 2 "--vocab-size goes with a built-in --task or --tokenizer spm" seq2seq-train --train "$fx/pairs.tsv" \
  --vocab-size 5 --model lstm --steps 1 --save x.json
printf '{"format": "something else"}\n' > foreign.json
expect_error 1 "foreign.json: not an attnkit seq2seq checkpoint" seq2seq-train "${common[@]}" --steps 300 \
  --resume foreign.json --save x.json
head -c 3000 m.json > truncated.json
expect_error 1 "truncated.json" seq2seq-train "${common[@]}" --steps 300 --resume truncated.json --save x.json
expect_error 1 "vocabulary differs" seq2seq-train --task reverse --vocab-size 7 --min-len 2 --max-len 4 \
  --train-size 64 --valid-size 16 --model lstm --attention dot --hidden 24 --embed 12 --steps 300 --resume m.json \
  --save m.json
expect_error 1 "cannot continue as lstm with attention dot, embed 12, hidden 32" seq2seq-train --task reverse \
  --vocab-size 5 --min-len 2 --max-len 4 --train-size 64 --valid-size 16 --hidden 32 --steps 300 --resume m.json \
  --save m.json
# an option that differs from the checkpoint's training options is a usage error without --override
expect_error 2 "give --override" seq2seq-train --lr 0.123 --steps 300 --resume m.json --save m.json
cmp -s m.json keep.json || fail "a refused resume changed the checkpoint"
[[ ! -e x.json ]] || fail "a failed run left x.json"

# --- usage errors: exit 2
expect_error 2 "give --task NAME or --train FILE" seq2seq-train --model lstm --save x.json
expect_error 2 "--save" seq2seq-train --task copy --model lstm
expect_error 2 "give --model" seq2seq-train --task copy --save x.json
expect_error 2 "--attention" seq2seq-train --task copy --model lstm --attention luong --save x.json
expect_error 2 "excludes" seq2seq-train --task copy --train "$fx/pairs.tsv" --model lstm --save x.json

finish seq2seq_train

#!/usr/bin/env bash
# seq2seq-train --model transformer: a tiny run learns the copy task (summary, checkpoint config and PyTorch
# state_dict names), --resume continues a Transformer checkpoint up to --steps, and the error contract (a
# family mismatch on resume: exit 1; --heads that do not divide --d-model: exit 2).
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

num() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$@"; }
common=(--task copy --vocab-size 5 --min-len 2 --max-len 4 --train-size 200 --valid-size 16 --model transformer
        --layers 1 --d-model 32 --heads 2 --ff 64 --batch 16 --lr 0.005 --threads 1 --log-every 100)

seq2seq-train "${common[@]}" --steps 300 --save t.json --metrics t.jsonl > sum.json || fail "tiny run exited $?"
python3 - <<'PY' || fail "summary / checkpoint: $(cat sum.json)"
import json
s = json.load(open("sum.json"))
assert s["step"] == 300, s
assert s["valid_loss"] < 0.8, s  # 0.42 in the sanitizer build (-O1: other rounding), ~0.3 in release
assert s["token_accuracy"] > 0.7, s
lines = [json.loads(l) for l in open("t.jsonl")]
assert [l["step"] for l in lines] == [100, 200, 300] and lines[-1]["valid_loss"] < lines[0]["valid_loss"], lines
c = json.load(open("t.json"))
cfg = c["config"]
assert cfg["family"] == "transformer" and cfg["d_model"] == "32" and cfg["heads"] == "2", cfg
assert cfg["encoder_layers"] == "1" and cfg["norm_first"] == "false", cfg
for k in ("layers.0.self_attn.in_proj_weight", "layers.0.linear1.weight", "layers.0.norm2.bias", "norm.weight"):
    assert k in c["encoder"], k
assert "layers.0.multihead_attn.in_proj_weight" in c["decoder"], list(c["decoder"])
assert "weight" in c["src_embed"] and "weight" in c["tgt_embed"] and "bias" in c["output"]
PY

# resume: continues from step 300 up to 320
seq2seq-train "${common[@]}" --steps 320 --resume t.json --save t2.json > rsum.json || fail "resume exited $?"
[[ "$(num rsum.json start_step)" == 300 && "$(num rsum.json step)" == 320 ]] || fail "resume summary: $(cat rsum.json)"
# exact resume, bit for bit (dropout on): 40 straight steps equal 20 + 20 resumed; and the same bits wherever
# the heap puts the buffers (an LD_PRELOAD malloc that misaligns on purpose, release builds): the row sums of
# layer norm, softmax and cross-entropy run in a fixed order (ops/row_loop.hpp fixed_sum)
nowall() { sed 's/"tokens_per_s":[^,}]*,\{0,1\}//' "$@"; }
exact=(--task copy --vocab-size 5 --min-len 2 --max-len 4 --train-size 200 --valid-size 16 --model transformer
       --layers 1 --d-model 32 --heads 2 --ff 64 --batch 16 --lr 0.005 --threads 1 --log-every 10 --dropout 0.1)
seq2seq-train "${exact[@]}" --steps 40 --save e.json --metrics e.jsonl > /dev/null || fail "straight run exited $?"
seq2seq-train "${exact[@]}" --steps 20 --save h.json --metrics r.jsonl > /dev/null || fail "first half exited $?"
seq2seq-train "${exact[@]}" --steps 40 --resume h.json --save h.json --metrics r.jsonl > /dev/null ||
  fail "second half exited $?"
[[ "$(nowall e.jsonl)" == "$(nowall r.jsonl)" ]] || fail "resumed metrics differ: $(diff <(nowall e.jsonl) <(nowall r.jsonl))"
if [[ -n "${ATTNKIT_MISALIGN:-}" ]]; then
  for seed in 1 2; do
    ATTNKIT_MISALIGN_SEED=$seed LD_PRELOAD="$ATTNKIT_MISALIGN" seq2seq-train "${exact[@]}" --steps 40 \
      --save m$seed.json --metrics m$seed.jsonl > /dev/null || fail "misaligned run $seed exited $?"
    [[ "$(nowall m$seed.jsonl)" == "$(nowall e.jsonl)" ]] ||
      fail "misaligned run $seed: $(diff <(nowall e.jsonl) <(nowall m$seed.jsonl))"
  done
fi

# pre-LN trains too
seq2seq-train "${common[@]}" --norm-first --steps 5 --save pre.json > /dev/null || fail "--norm-first exited $?"
grep -q '"norm_first":"true"' pre.json || fail "--norm-first not in the checkpoint's config"

expect_error 1 "the checkpoint's model is a transformer; it cannot continue as a recurrent seq2seq" \
  seq2seq-train --task copy --vocab-size 5 --min-len 2 --max-len 4 --train-size 200 --valid-size 16 --model lstm \
  --steps 310 --resume t.json --save x.json
expect_error 2 "--heads 3 does not divide --d-model 16" seq2seq-train --task copy --model transformer --d-model 16 \
  --heads 3 --steps 1 --save x.json
# an option of the other family would do nothing: refused (exit 2), naming it
expect_error 2 "--hidden does nothing with --model transformer" seq2seq-train --task copy --model transformer \
  --hidden 8 --steps 1 --save x.json
expect_error 2 "--teacher-forcing does nothing with --model transformer" seq2seq-train --task copy \
  --model transformer --teacher-forcing 0.5 --steps 1 --save x.json
expect_error 2 "--heads does nothing with --model lstm" seq2seq-train --task copy --model lstm --heads 2 --steps 1 \
  --save x.json
[[ ! -e x.json ]] || fail "a refused run wrote x.json"
finish seq2seq_train_transformer

#!/usr/bin/env bash
# Quantized checkpoints (transformer-decode --save-quantized, docs/tensor-format.md "Quantized checkpoints"): a
# Transformer, a recurrent seq2seq with attention and a tied recurrent language model, each saved in int8 and
# bf16, decode from the saved file in the same precision to exactly the tokens and scores of the float32
# checkpoint run in that precision (the stored copies are used, not lowered again); an fp32 run dequantizes
# them and says so once on stderr; another precision is a usage error naming both; seq2seq-eval reads them the
# same way; training does not resume from one; the int8 file of a model whose matrices dominate is about 4x
# smaller than the same file with every matrix in float32; a tampered file is refused naming the tensor; misused
# options are usage errors that write nothing. lstm-run saves and reads its weights bundle the same way.
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish

seq2seq-train --task copy --vocab-size 5 --min-len 2 --max-len 4 --model transformer --layers 1 --d-model 32 \
  --heads 2 --ff 64 --steps 60 --lr 0.005 --threads 1 --save t.json > /dev/null || fail "transformer training exited $?"
seq2seq-train --task reverse --vocab-size 5 --min-len 2 --max-len 4 --model lstm --attention dot --hidden 16 \
  --embed 8 --layers 2 --steps 30 --lr 0.01 --threads 1 --save r.json > /dev/null || fail "lstm training exited $?"
for i in 1 2 3 4; do echo "the cat sat on the mat and the dog sat on the log."; done > train.txt
seq2seq-train --model lstm-lm --tied --train train.txt --context 8 --hidden 16 --embed 16 --batch 4 --steps 10 \
  --threads 1 --save lm.json > /dev/null || fail "lstm-lm training exited $?"
printf '1 2\n3 4 0\n0 4 1 2\n2 4 1\n' > src.txt

# --- saved in int8 and bf16: the same tokens and scores as the float32 checkpoint in that precision
for m in t r; do
  for p in int8 bf16; do
    transformer-decode $m.json --precision $p --save-quantized $m.$p.safetensors 2> save.err < /dev/null > save.out ||
      fail "$m $p: saving exited $?"
    [[ ! -s save.out ]] || fail "$m $p: saving wrote on stdout: $(cat save.out)"
    grep -q "wrote $m.$p.safetensors; no --src or --prompt, nothing decoded" save.err || fail "$m $p: $(cat save.err)"
    for s in greedy beam; do
      transformer-decode $m.json --threads 1 --precision $p --strategy $s < src.txt > a.jsonl 2> /dev/null ||
        fail "$m $p $s: fp32 checkpoint exited $?"
      transformer-decode $m.$p.safetensors --threads 1 --precision $p --strategy $s < src.txt > b.jsonl 2> b.err ||
        fail "$m $p $s: saved file exited $?"
      cmp -s a.jsonl b.jsonl || fail "$m $p $s: the saved file decodes otherwise: $(paste a.jsonl b.jsonl)"
      ! grep -q dequantized b.err || fail "$m $p $s: dequantized in its own precision: $(cat b.err)"
    done
    # the file's run saves the same file again (its stored copies, as they are)
    transformer-decode $m.$p.safetensors --precision $p --save-quantized again.safetensors 2> /dev/null ||
      fail "$m $p: saving again exited $?"
    cmp -s $m.$p.safetensors again.safetensors || fail "$m $p: saved again, the file differs"
  done
done
transformer-decode lm.json --precision int8 --save-quantized lm.int8.safetensors 2> /dev/null || fail "lm: saving exited $?"
a="$(transformer-decode lm.json --precision int8 --prompt 'the cat' --max-new-tokens 8 2> /dev/null)"
b="$(transformer-decode lm.int8.safetensors --precision int8 --prompt 'the cat' --max-new-tokens 8 2> /dev/null)"
[[ -n "$a" && "$a" == "$b" ]] || fail "tied lm: the saved file generates otherwise: $a / $b"
# a tied embedding is stored twice: float32 for the lookup, int8 for the output product
python3 - <<'EOF' || fail "tied lm: layout"
import json, struct
b = open("lm.int8.safetensors", "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
assert h["embed.weight"]["dtype"] == "F32", h["embed.weight"]
assert h["quantized.weights.embed.weight"]["dtype"] == "I8"
assert h["quantized.scales.embed.weight"]["shape"] == h["embed.weight"]["shape"][:1]
EOF

# --- fp32 (no --precision) dequantizes and says so once; the layout: I8 matrices, F32 scales, nothing else lowered
transformer-decode t.int8.safetensors --src '1 2 3' > /dev/null 2> deq.err || fail "dequantized run exited $?"
[[ "$(cat deq.err)" == "transformer-decode: t.int8.safetensors: int8 weights (11 matrices) dequantized to float32; --precision int8 uses them as stored" ]] ||
  fail "dequantize note: $(cat deq.err)"
python3 - <<'EOF' || fail "int8 layout"
import json, struct
b = open("t.int8.safetensors", "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
meta = json.loads(h.pop("__metadata__")["attnkit_meta"])
assert meta["quantized"]["precision"] == "int8" and meta["quantized"]["matrices"] == "11", meta["quantized"]
w = {k: v for k, v in h.items() if k.startswith("quantized.weights.")}
s = {k: v for k, v in h.items() if k.startswith("quantized.scales.")}
assert len(w) == 11 and len(s) == 11
for k, v in w.items():
    assert v["dtype"] == "I8", k
    assert s["quantized.scales." + k[len("quantized.weights."):]]["shape"] == v["shape"][:1], k
assert all(v["dtype"] == "F32" for k, v in h.items() if k not in w), h
assert "decoder.layers.0.linear1.weight" not in h and "decoder.layers.0.linear1.bias" in h
EOF

# --- another precision: refused, naming both; so is --save-quantized without a precision or a .safetensors name
expect_error 2 "--precision bf16: t.int8.safetensors holds int8 weights" transformer-decode t.int8.safetensors --src '1 2' --precision bf16
expect_error 2 "--save-quantized x.safetensors goes with --precision bf16 or int8" transformer-decode t.json --src '1 2' --save-quantized x.safetensors
expect_error 2 "--save-quantized x.safetensors goes with --precision bf16 or int8" transformer-decode t.json --src '1 2' --precision fp32 --save-quantized x.safetensors
expect_error 2 "a quantized checkpoint is a .safetensors file" transformer-decode t.json --src '1 2' --precision int8 --save-quantized x.json
[[ ! -e x.safetensors && ! -e x.json ]] || fail "a refused --save-quantized wrote a file"

# --- seq2seq-eval: the saved file in its precision reports what the checkpoint does in it; fp32 dequantizes
printf '1 2\t1 2\n3 4 0\t3 4 0\n' > test.tsv
seq2seq-eval t.json test.tsv --threads 1 --precision int8 > e1.json 2> /dev/null || fail "seq2seq-eval checkpoint exited $?"
seq2seq-eval t.int8.safetensors test.tsv --threads 1 --precision int8 > e2.json 2> /dev/null || fail "seq2seq-eval saved exited $?"
cmp -s e1.json e2.json || fail "seq2seq-eval: $(cat e1.json e2.json)"
seq2seq-eval t.int8.safetensors test.tsv --threads 1 > /dev/null 2> e.err || fail "seq2seq-eval fp32 exited $?"
grep -q "^seq2seq-eval: t.int8.safetensors: int8 weights (11 matrices) dequantized to float32" e.err || fail "seq2seq-eval note: $(cat e.err)"
expect_error 2 "t.int8.safetensors holds int8 weights" seq2seq-eval t.int8.safetensors test.tsv --precision bf16

# --- training does not resume from a quantized checkpoint
expect_error 1 "a quantized checkpoint (transformer-decode --save-quantized)" seq2seq-train --resume t.int8.safetensors --task copy --steps 1 --save y.json

# --- the size: int8 about 4x smaller than the same model with every matrix in float32 (the matrices dominate)
seq2seq-train --task copy --vocab-size 5 --model transformer --layers 2 --d-model 128 --heads 2 --ff 512 --steps 1 \
  --threads 1 --save big.json > /dev/null || fail "big training exited $?"
transformer-decode big.json --precision int8 --save-quantized big8.safetensors 2> /dev/null || fail "big int8 exited $?"
transformer-decode big.json --precision int8 --keep-fp32 '*' --save-quantized big32.safetensors 2> /dev/null || fail "big fp32 exited $?"
python3 -c "
import os; r = os.path.getsize('big32.safetensors') / os.path.getsize('big8.safetensors')
assert 3.5 < r < 4.0, r" || fail "int8 file size ratio"

# --- tampered files are refused (exit 1), naming the tensor
python3 - <<'EOF'
import json, struct
b = open("t.int8.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); data = bytearray(b[8 + n:])
def write(name, h, data):
    t = json.dumps(h).encode(); t += b" " * ((8 - len(t) % 8) % 8)
    open(name, "wb").write(struct.pack("<Q", len(t)) + t + bytes(data))
k = "quantized.scales.decoder.layers.0.linear1.weight"
neg = bytearray(data); o = h[k]["data_offsets"][0]; neg[o:o + 4] = struct.pack("<f", -1.0)
write("neg.safetensors", h, neg)
k = "quantized.weights.output.weight"
m = bytearray(data); o = h[k]["data_offsets"][0]; m[o] = 0x80  # -128
write("m128.safetensors", h, m)
h2 = json.loads(json.dumps(h)); h2[k]["dtype"] = "U8"
write("u8.safetensors", h2, data)
EOF
expect_error 1 "neg.safetensors#quantized.weights.decoder.layers.0.linear1.weight: scale [0] is -1" transformer-decode neg.safetensors --src '1 2'
expect_error 1 "m128.safetensors#quantized.weights.output.weight: value [0, 0] = -128 is outside [-127, 127]" transformer-decode m128.safetensors --src '1 2'
expect_error 1 "u8.safetensors#quantized.weights.output.weight: dtype U8, expected I8 (the section" transformer-decode u8.safetensors --src '1 2'
# --- lstm-run: the state_dict with the section; the same outputs in its precision, dequantized in fp32
lstm-run --init --input-size 6 --hidden-size 8 --layers 2 --bidirectional --cell gru --seed 1 --save-weights w.json
tensor randn --shape 3,5,6 --seed 2 > x.json
for p in int8 bf16; do
  lstm-run --weights w.json --cell gru --precision $p --save-quantized w.$p.safetensors < /dev/null > save.out 2> /dev/null ||
    fail "lstm-run $p: saving exited $?"
  [[ ! -s save.out ]] || fail "lstm-run $p: saving alone wrote on stdout"
  lstm-run x.json --weights w.json --cell gru --precision $p > a.json 2> /dev/null || fail "lstm-run $p: exited $?"
  lstm-run x.json --weights w.$p.safetensors --cell gru --precision $p > b.json 2> /dev/null || fail "lstm-run $p saved: exited $?"
  cmp -s a.json b.json || fail "lstm-run $p: the saved weights run otherwise"
done
lstm-run x.json --weights w.int8.safetensors --cell gru > /dev/null 2> l.err || fail "lstm-run dequantized exited $?"
[[ "$(cat l.err)" == "lstm-run: w.int8.safetensors: int8 weights (8 matrices) dequantized to float32; --precision int8 uses them as stored" ]] ||
  fail "lstm-run note: $(cat l.err)"
expect_error 2 "--precision bf16: w.int8.safetensors holds int8 weights" lstm-run x.json --weights w.int8.safetensors --cell gru --precision bf16
expect_error 2 "--save-quantized q.safetensors goes with --precision bf16 or int8" lstm-run x.json --weights w.json --cell gru --save-quantized q.safetensors
tensor get w.int8.safetensors -o w8.json
expect_error 1 "w8.json: a quantized checkpoint (its \"quantized\" section) is read from .safetensors only" lstm-run x.json --weights w8.json --cell gru
finish precision_saved

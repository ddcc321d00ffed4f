#!/usr/bin/env bash
# .npy / .npz / .safetensors through the tools (io/tensor_file.hpp): chosen by extension for every
# tensor, reference and weights argument and for -o; `tensor get X.npy -o X.json` converts; float32
# round trips are exact; float64 input gives a note on stderr; a stream or text is not written to a
# binary file; a damaged file is refused like damaged JSON (exit 1, nothing on stdout); standard input is
# sniffed (a binary file piped in is one document, NDJSON stays a stream; hostile binaries refused).
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$src/tests/cli/lib/common.sh"
fx="$src/tests/fixtures/interop"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"

# conversion both ways, and exactness: JSON -> npy -> JSON gives the same text
tensor get "$fx/f32.npy" -o f32.json || fail "tensor get f32.npy -o f32.json"
tensor diff f32.json "$fx/f32.json" --allow-nan --rtol 0 --atol 0 -q || fail "f32.npy converted differs from numpy's values"
tensor randn --shape 3,4 --seed 5 > r.json
for ext in npy; do
  tensor get r.json -o "r.$ext" && tensor get "r.$ext" > back.json || fail "round trip through .$ext"
  cmp -s r.json back.json || fail "JSON -> .$ext -> JSON changed the text"
done
tensor pack a=r.json enc/b=r.json > b.json
for ext in npz safetensors; do
  tensor get b.json -o "b.$ext" || fail "writing .$ext"
  tensor get "b.$ext#enc.b" > back.json && cmp -s r.json back.json || fail ".$ext member enc.b (nested names joined by '.') differs"
done
[[ "$(head -c 6 r.npy | tail -c 5)" == NUMPY ]] || fail "r.npy lacks the NUMPY magic"
[[ "$(head -c 2 b.npz)" == PK ]] || fail "b.npz is not a zip"

# numpy's compressed archive and a precision note for float64
tensor get "$fx/bundle_compressed.npz#w" > w.json || fail "savez_compressed member"
tensor get "$fx/f64.npy" > /dev/null 2> note.txt || fail "f64.npy refused"
grep -qF "tensor: note: $fx/f64.npy: float64 rounded to float32: 2 of 4 values changed" note.txt || fail "no precision note: $(cat note.txt)"
tensor get "$fx/f64_exact.npy" > /dev/null 2> note.txt && [[ ! -s note.txt ]] || fail "a note for exact float64: $(cat note.txt)"

# weights: a safetensors state_dict runs as its JSON twin; results written to .npz
lstm-run --init --input-size 3 --hidden-size 4 --seed 1 --save-weights w.json
lstm-run --weights w.json --save-weights w.safetensors
tensor randn --shape 2,5,3 --seed 2 -o x.npy
lstm-run x.npy --weights w.json > ref.json
lstm-run x.npy --weights w.safetensors -o out.npz || fail "lstm-run with .safetensors weights, -o .npz"
tensor diff out.npz ref.json --rtol 0 --atol 0 -q || fail "the .safetensors weights gave another result"
attn-score --query out.npz#output --keys out.npz#output -o att.safetensors || fail "attn-score reading .npz, writing .safetensors"
tensor get att.safetensors#weights > /dev/null || fail "attn-score's .safetensors output"

# refused: a bundle to .npy, a stream to a binary file, text to a binary file, damaged files
expect_error 1 "r.npy: .npy holds one tensor, and this is a bundle (has: a, enc)" tensor get b.json -o r.npy
cmp -s <(tensor get r.npy) r.json || fail "a refused write changed r.npy"
printf '[1]\n[2]\n' > s.ndjson
expect_error 1 "s.npy: holds one result, and the input is a stream of records" tensor get s.ndjson -o s.npy
[[ ! -e s.npy ]] || fail "a refused stream left s.npy"
expect_error 2 "-o t.npy: this writes text, not tensors" tensor show r.json -o t.npy
head -c 100 r.npy > cut.npy
expect_error 1 "cut.npy: truncated" tensor get cut.npy
head -c 60 b.safetensors > cut.safetensors
expect_error 1 "cut.safetensors: truncated: its header says" lstm-run x.npy --weights cut.safetensors
expect_error 1 "x.npy: is a tensor of shape [2, 5, 3], not a bundle" tensor get x.npy#a
# a PyTorch-exported Transformer (tests/fixtures/gen_transformer_exported.py): its state_dict as .safetensors and
# .npz beside a config whose vocabulary puts the special tokens at other ids (found by their texts' positions,
# or given as pad_id/bos_id/eos_id/unk_id with other texts); greedy decoding gives PyTorch's own greedy tokens
pt="$src/tests/fixtures/pytorch"
python3 -c 'import json, sys
for l in open(sys.argv[1]): print(json.loads(l)["src"])' "$pt/transformer_expected.jsonl" > tsrc.txt
python3 -c 'import json, sys
for l in open(sys.argv[1]): print(json.loads(l)["text"])' "$pt/transformer_expected.jsonl" > texpected.txt
for w in transformer.safetensors transformer.npz; do
  for c in transformer_config.json transformer_config_ids.json; do
    transformer-decode "$pt/$c" --weights "$pt/$w" --max-len 8 < tsrc.txt > tout.jsonl || fail "decoding $c + $w exited $?"
    python3 -c 'import json, sys
print("\n".join(json.loads(l)["text"] for l in open(sys.argv[1])))' tout.jsonl > ttext.txt
    cmp -s ttext.txt texpected.txt || fail "$c + $w: not PyTorch's greedy tokens: $(diff ttext.txt texpected.txt)"
  done
done
# the ids must be distinct, inside the vocabulary, and each special found
python3 - "$pt/transformer_config_ids.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
json.dump(dict(c, eos_id=c["bos_id"]), open("same_ids.json", "w"))
json.dump(dict(c, unk_id=10), open("out_of_range.json", "w"))
json.dump({k: v for k, v in c.items() if k != "unk_id"}, open("no_unk.json", "w"))
PY
expect_error 1 "same_ids.json: vocab/source: <bos> and <eos> are both id 4 (the special tokens must differ)" \
  transformer-decode same_ids.json --weights "$pt/transformer.safetensors" --src 'a b'
expect_error 1 "out_of_range.json: vocab/source: unk_id 10 is outside the 10 tokens" \
  transformer-decode out_of_range.json --weights "$pt/transformer.safetensors" --src 'a b'
expect_error 1 "no_unk.json: vocab/source: no <unk> token in \"tokens\" and no \"unk_id\" in the config" \
  transformer-decode no_unk.json --weights "$pt/transformer.npz" --src 'a b'

# standard input: a binary file is told by its first bytes (\x93NUMPY, PK\x03\x04, safetensors' size then '{');
# NDJSON streams stay streams
tensor get - -o piped.json < r.npy || fail "cat r.npy | tensor get - exited $?"
cmp -s piped.json r.json || fail "a .npy on standard input read differently"
[[ "$(tensor get '-#enc.b' < b.npz)" == "$(cat r.json)" ]] || fail "a .npz on standard input, member enc.b"
[[ "$(tensor get '-#enc.b' < b.safetensors)" == "$(cat r.json)" ]] || fail "a .safetensors on standard input, member enc.b"
lstm-run - --weights w.safetensors < x.npy > piped_out.json || fail "lstm-run with a .npy on standard input"
tensor diff piped_out.json ref.json --rtol 0 --atol 0 -q || fail "lstm-run's result from standard input differs"
printf '[1]\n[2]\n' | tensor get - > stream.json || fail "NDJSON on standard input"
[[ "$(cat stream.json)" == $'[1]\n[2]' ]] || fail "NDJSON on standard input: $(cat stream.json)"
printf '1\n' | tensor get - > short.json && [[ "$(cat short.json)" == 1 ]] || fail "a document shorter than the sniff"
# hostile binaries on standard input: exit 1, the problem named, nothing on stdout
expect_error 1 "<stdin>: truncated" tensor get - < cut.npy
python3 -c 'import struct, sys; h = b"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999],\"data_offsets\":[0,4]}}"
sys.stdout.buffer.write(struct.pack("<Q", len(h)) + h + bytes(4))' > lie.bin
expect_error 1 "<stdin>#a: data_offsets [0, 4] hold 4 bytes; shape [99999] of float32 needs 399996" tensor get - < lie.bin
expect_error 1 "<stdin>: not a .npz file" tensor get - < <(printf 'PK\x03\x04not a zip at all, just bytes')
expect_error 1 "<stdin>: .npy format version 9.0 is not supported" tensor get - < <(printf '\x93NUMPY\x09\x00\x00\x00')
finish interop

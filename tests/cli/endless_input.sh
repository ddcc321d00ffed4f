#!/usr/bin/env bash
# A device or an endless stream given as a tensor, weights, a checkpoint, a graphone model or a text file is
# refused at the first bytes that cannot start its format (exit 1, the parser's message naming it, nothing on
# stdout), never read to its end: each run has a generous timeout, and a tool that reads on until memory runs
# out fails it.
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$src/tests/cli/lib/common.sh"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"

# quick STATUS "part" CMD...: expect_error within 20 s (timeout's 124 is not the status wanted)
quick() {
  local want="$1" msg="$2"; shift 2
  expect_error "$want" "$msg" timeout 20 "$@"
}

tensor randn --shape 5,3 --seed 1 > x.json
tensor randn --shape 4,6 --seed 2 > q.json
for ext in npy npz safetensors; do ln -s /dev/zero "zero.$ext"; done

zero='/dev/zero:1:1: expected a JSON value, found byte 0x00'
quick 1 "$zero" tensor show /dev/zero
quick 1 "$zero" tensor get /dev/zero#a
quick 1 "<stdin>:1:1: expected a JSON value, found byte 0x00" tensor show - < /dev/zero
quick 1 "$zero" lstm-run x.json --weights /dev/zero
quick 1 "$zero" attn-score --query q.json --keys q.json --weights /dev/zero --score general
quick 1 "$zero" transformer-decode /dev/zero --src '1 2'
quick 1 "$zero" seq2seq-train --task copy --steps 1 --save out.json --resume /dev/zero
quick 1 "zero.npy: not a .npy file" tensor show zero.npy
quick 1 "zero.npz: not a .npz file" tensor show zero.npz
quick 1 "zero.safetensors" tensor show zero.safetensors
quick 1 "zero.npz: not a .npz file" lstm-run x.json --weights zero.npz
quick 1 "zero.safetensors" seq2seq-train --task copy --steps 1 --save out.json --resume zero.safetensors
# an endless stream of text that is no JSON, and one that breaks off inside a record
quick 1 "<stdin>:1:1: expected a JSON value, found 'y'" tensor show - < <(yes)
quick 1 "<stdin>:1:3: expected" tensor show - < <(printf '[1'; cat /dev/zero)

# text files: training data, a vocabulary, a test set (the first NUL byte), a model config (its JSON rules)
printf 'ab\tba\nbc\tcb\n' > d.tsv
nul='/dev/zero: byte 0 is a NUL byte: not a text file'
quick 1 "$nul" seq2seq-train --train /dev/zero --model lstm --steps 1 --save out.json
quick 1 "$nul" seq2seq-train --train d.tsv --vocab /dev/zero --model lstm --steps 1 --save out.json
quick 1 "<stdin>: byte 0 is a NUL byte" seq2seq-train --train - --model lstm --steps 1 --save out.json < /dev/zero
quick 1 ": byte 6 is a NUL byte: not a text file" seq2seq-train --train d.tsv --valid <(printf 'ab\tba\n'; cat /dev/zero) --model lstm --steps 1 --save out.json
seq2seq-train --train d.tsv --model lstm --hidden 4 --embed 4 --steps 1 --save m.json > /dev/null || fail "training exited $?"
quick 1 "$nul" seq2seq-eval m.json /dev/zero
quick 1 "$nul" graphone-train --train /dev/zero --save out.json
quick 1 "<stdin>: byte 0 is a NUL byte" graphone-train --train - --save out.json < /dev/zero
# a graphone model (seq2seq-eval --rescore-graphone): JSON or a binary file, refused at its first bytes
quick 1 "$zero" seq2seq-eval m.json d.tsv --strategy beam --rescore-graphone /dev/zero
quick 1 "zero.safetensors" seq2seq-eval m.json d.tsv --strategy beam --rescore-graphone zero.safetensors
quick 1 "zero.npz: not a .npz file" transformer-decode m.json --src ab --strategy beam --rescore-graphone zero.npz
quick 1 "/dev/zero:1:1: expected a JSON value, found byte 0x00" transformer-decode /dev/zero --weights x.json --src '1 2'
[[ ! -e out.json ]] || fail "a refused input left a checkpoint"

finish endless_input

#!/usr/bin/env bash
# A JSON-lines record with a key given twice is refused, naming the file, the line and the key (a training
# data line, a seq2seq-eval test line, a transformer-decode request), as every JSON reader of attnkit refuses
# it; a --vocab file that starts with a UTF-8 byte-order mark reads as without one.
set -uo pipefail
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"  # fail, expect_error, finish
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"

printf 'ab\tba\nbc\tcb\nca\tac\n' > d.tsv
small=(--model lstm --hidden 4 --embed 4 --steps 1 --threads 1)
seq2seq-train --train d.tsv "${small[@]}" --save m.json > /dev/null || fail "training exited $?"

# --- training data and test sets: the line and the key named, nothing trained
printf '{"src": "ab", "tgt": "ba"}\n{"src": "ab", "tgt": "ba", "src": "zz"}\n' > twice.jsonl
expect_error 1 'twice.jsonl:2: an object with the key "src" twice' seq2seq-train --train twice.jsonl "${small[@]}" --save t.json
[[ ! -e t.json ]] || fail "a refused data file left a checkpoint"
printf '{"src": "ab", "tgt": "ba", "tgt": "ab"}\n' > twice_tgt.jsonl
expect_error 1 'an object with the key "tgt" twice' seq2seq-eval m.json twice_tgt.jsonl
# nested objects too: their keys are their own
printf '{"src": "ab", "tgt": "ba", "x": {"k": 1, "k": 2}}\n' > nested.jsonl
expect_error 1 'an object with the key "k" twice' seq2seq-train --train nested.jsonl "${small[@]}" --save t.json
printf '{"src": "ab", "tgt": "ba", "x": {"src": 1}}\n' > other.jsonl
seq2seq-train --train other.jsonl "${small[@]}" --save o.json > /dev/null || fail "a key repeated in an inner object only was refused"

# --- decode requests
expect_error 1 'standard input: line 2: an object with the key "src" twice' \
  sh -c 'printf "{\"src\": \"ab\"}\n{\"src\": \"ab\", \"src\": \"ca\"}\n" | transformer-decode m.json'

# --- a byte-order mark before a vocabulary's first token: the token is "a", not "\ufeffa"
printf '\xef\xbb\xbfa\nb\nc\n' > v.txt
seq2seq-train --train d.tsv --vocab v.txt "${small[@]}" --save v.json > /dev/null 2> err.txt || fail "--vocab with a BOM exited $?"
grep -q "not in v.txt" err.txt && fail "a BOM made a token unknown: $(cat err.txt)"
python3 - <<'PY' || fail "the vocabulary kept the byte-order mark"
import json, sys
tokens = json.load(open("v.json"))["vocab"]["source"]["tokens"]
sys.exit(0 if "a" in tokens and not any(t.startswith("\ufeff") for t in tokens) else 1)
PY
printf '\xef\xbb\xbf{"tokens": ["<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c"]}' > v.json.txt
seq2seq-train --train d.tsv --vocab v.json.txt "${small[@]}" --save w.json > /dev/null || fail "a JSON --vocab with a BOM exited $?"

finish repeated_keys_bom

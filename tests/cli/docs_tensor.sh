#!/usr/bin/env bash
# The examples in docs/tensor.md and docs/tensor-format.md run and print what the docs say:
# every "$ COMMAND" line of a ```sh block runs (bash, stderr into stdout, in order, one empty
# folder per document) and must print exactly the lines below it.
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
failures=0
commands=0

check_doc() {
  local doc="$1" work
  work="$(mktemp -d)"
  local in_block=0 cmd="" expected="" have_cmd=0
  flush() {
    if [[ $have_cmd -eq 1 ]]; then
      local actual
      actual="$(cd "$work" && bash -c "$cmd" 2>&1)"
      commands=$((commands + 1))
      if [[ "$actual" != "$expected" ]]; then
        echo "FAIL: $(basename "$doc"): \$ $cmd" >&2
        diff <(printf '%s\n' "$expected") <(printf '%s\n' "$actual") >&2
        failures=$((failures + 1))
      fi
    fi
    have_cmd=0
    cmd=""
    expected=""
  }
  while IFS= read -r line || [[ -n "$line" ]]; do
    if [[ $in_block -eq 0 ]]; then
      [[ "$line" == '```sh'* ]] && in_block=1
      continue
    fi
    if [[ "$line" == '```'* ]]; then
      flush
      in_block=0
    elif [[ "$line" == '$ '* ]]; then
      flush
      cmd="${line:2}"
      have_cmd=1
    elif [[ $have_cmd -eq 1 ]]; then
      expected+="${expected:+$'\n'}$line"
    fi
  done <"$doc"
  flush
  rm -rf "$work"
}

for doc in "$src/docs/tensor.md" "$src/docs/tensor-format.md"; do
  [[ -f "$doc" ]] || { echo "FAIL: missing $doc" >&2; failures=$((failures + 1)); continue; }
  check_doc "$doc"
done
if [[ $failures -gt 0 ]]; then
  echo "$failures of $commands documented commands differ" >&2
  exit 1
fi
echo "docs_tensor: $commands documented commands print what the docs say"

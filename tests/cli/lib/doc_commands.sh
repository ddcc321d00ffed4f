#!/usr/bin/env bash
# Usage: doc_commands.sh [--exact] NAME.md — every command in docs/NAME.md's ```sh blocks runs and exits 0:
# in blocks with "$ COMMAND" lines those lines (the output shown under them is abridged),
# elsewhere every line; in order, in one empty folder. With --exact, the lines shown under a
# "$ COMMAND" are its whole output (standard output and standard error, as a terminal shows them)
# and must be printed exactly. (Not a ctest case itself: tests/cli/*.sh call it, one per manual.)
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../../.." && pwd)}"
exact=0
[[ "${1:-}" == --exact ]] && { exact=1; shift; }
name="${1:?usage: doc_commands.sh [--exact] NAME.md}"
doc="$src/docs/$name"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
failures=0 commands=0
run() {  # run COMMAND [EXPECTED]
  commands=$((commands + 1))
  if (( exact )); then
    if ! (cd "$work" && bash -c "set -o pipefail; $1" > out.txt 2>&1); then
      echo "FAIL: docs/$name: $1" >&2
      cat "$work/out.txt" >&2
      failures=$((failures + 1))
    elif [[ "$(cat "$work/out.txt")" != "$2" ]]; then
      echo "FAIL: docs/$name: $1 printed something else:" >&2
      diff <(printf '%s\n' "$2") "$work/out.txt" >&2
      failures=$((failures + 1))
    fi
  elif ! (cd "$work" && bash -c "set -o pipefail; $1" > out.txt 2> err.txt); then
    echo "FAIL: docs/$name: $1" >&2
    cat "$work/err.txt" >&2
    failures=$((failures + 1))
  fi
}
block=() in_block=0
while IFS= read -r line || [[ -n "$line" ]]; do
  if [[ $in_block -eq 0 ]]; then
    [[ "$line" == '```sh'* ]] && { in_block=1; block=(); }
    continue
  fi
  if [[ "$line" == '```'* ]]; then
    in_block=0
    dollar=0
    for l in "${block[@]}"; do [[ "$l" == '$ '* ]] && dollar=1; done
    cmd="" expected="" have=0
    for l in "${block[@]}"; do
      if [[ $dollar -eq 1 ]]; then
        if [[ "$l" == '$ '* ]]; then
          (( have )) && run "$cmd" "$expected"
          cmd="${l:2}" expected="" have=1
        elif (( have )); then
          expected+="${expected:+$'\n'}$l"
        fi
      elif [[ -n "$l" && "$l" != '#'* ]]; then run "$l"
      fi
    done
    (( have )) && run "$cmd" "$expected"
    continue
  fi
  block+=("$line")
done < "$doc"
(( commands > 10 )) || { echo "FAIL: only $commands commands found in $doc" >&2; exit 1; }
if (( failures )); then echo "$failures of $commands commands failed" >&2; exit 1; fi
echo "docs/$name: $commands commands ran"

#!/usr/bin/env bash
# Usage: doc_commands.sh NAME.md — every command in docs/NAME.md's ```sh blocks runs and exits 0:
# in blocks with "$ COMMAND" lines those lines (the output shown under them is abridged),
# elsewhere every line; in order, in one empty folder. (Not a ctest case itself: tests/cli/*.sh
# call it, one per manual.)
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../../.." && pwd)}"
name="${1:?usage: doc_commands.sh NAME.md}"
doc="$src/docs/$name"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
failures=0 commands=0
run() {
  commands=$((commands + 1))
  if ! (cd "$work" && bash -c "set -o pipefail; $1" > out.txt 2> err.txt); then
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
    for l in "${block[@]}"; do
      if [[ $dollar -eq 1 ]]; then [[ "$l" == '$ '* ]] && run "${l:2}"
      elif [[ -n "$l" && "$l" != '#'* ]]; then run "$l"
      fi
    done
    continue
  fi
  block+=("$line")
done < "$doc"
(( commands > 10 )) || { echo "FAIL: only $commands commands found in $doc" >&2; exit 1; }
if (( failures )); then echo "$failures of $commands commands failed" >&2; exit 1; fi
echo "docs/$name: $commands commands ran"

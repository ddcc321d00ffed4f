#!/usr/bin/env bash
# The library's floors (docs/architecture.md), lowest first; each floor includes only floors below it:
#
#   tensor -> io -> ops -> autograd -> nn -> models -> {train, decode} -> arch -> app -> tools
#
# train and decode stand side by side: neither includes the other. Reads every `#include "attnkit/..."`
# of ROOT/lib/attnkit and ROOT/tools and prints each include that goes up or sideways as
# FILE:LINE: FLOOR includes FLOOR (...); exit 1 if there is one, 0 otherwise.
# Usage: scripts/check_layers.sh [ROOT]   (ROOT: the source tree, default this script's)
set -euo pipefail
root="${1:-$(dirname "$0")/..}"
cd "$root"

# Floor of a folder under lib/attnkit (a file straight in lib/attnkit, e.g. version.hpp: 0).
declare -A level=([tensor]=0 [io]=1 [ops]=2 [autograd]=3 [nn]=4 [models]=5 [train]=6 [decode]=6
                  [arch]=7 [app]=8 [tools]=9)

floor_of_path() {  # lib/attnkit/ops/x.cpp -> ops; tools/... -> tools
  case "$1" in
    tools/*) echo tools ;;
    lib/attnkit/*/*) local rest="${1#lib/attnkit/}"; echo "${rest%%/*}" ;;
    *) echo "" ;;
  esac
}

bad=0 checked=0
while IFS= read -r -d '' file; do
  from="$(floor_of_path "$file")"
  [[ -n "$from" ]] || continue
  if [[ -z "${level[$from]+x}" ]]; then
    echo "$file: folder '$from' is no floor of docs/architecture.md (add it to scripts/check_layers.sh)" >&2
    bad=1; continue
  fi
  while IFS=: read -r line text; do
    target="${text#*\"attnkit/}"
    target="${target%%\"*}"
    checked=$((checked + 1))
    [[ "$target" == */* ]] || continue  # attnkit/version.hpp: below every floor
    to="${target%%/*}"
    if [[ -z "${level[$to]+x}" ]]; then
      echo "$file:$line: includes attnkit/$target, in no floor of docs/architecture.md" >&2; bad=1; continue
    fi
    if [[ "$to" == "$from" ]]; then continue; fi
    if (( level[$to] >= level[$from] )); then
      if (( level[$to] == level[$from] )); then kind="sideways"; else kind="upward"; fi
      echo "$file:$line: $from includes $to ($kind: attnkit/$target)" >&2
      bad=1
    fi
  done < <(grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"attnkit/' "$file" || true)
done < <(find lib/attnkit tools -type f \( -name '*.hpp' -o -name '*.cpp' -o -name '*.inc' -o -name '*.h' \) -print0 | sort -z)

if (( checked == 0 )); then echo "check_layers: no attnkit include found under $PWD" >&2; exit 1; fi
if (( bad )); then echo "check_layers: the floors are broken (docs/architecture.md)" >&2; exit 1; fi
echo "check_layers: $checked includes, every one downward" >&2

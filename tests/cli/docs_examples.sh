#!/usr/bin/env bash
# docs/examples.md has a row for every examples/NN-name folder, in the folders' order, and every example has a
# "# shows:" line (the walkthrough prints it); the relative links of README.md and docs/*.md lead to files
# that exist, and every examples/NN-name mentioned in the sources, docs and scripts exists.
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$(dirname "$0")/lib/common.sh"
page="$src/docs/examples.md"
folders="$(cd "$src/examples" && ls -d [0-9][0-9]-*/ | tr -d /)"
rows="$(grep -o '^| [^|]* | \[[0-9][0-9]-[a-z0-9-]*\]' "$page" | grep -o '\[[0-9][0-9]-[a-z0-9-]*\]' | tr -d '[]')"
[[ -n "$folders" ]] || fail "no examples/NN-name folders"
[[ "$rows" == "$folders" ]] || fail "docs/examples.md's rows are not the example folders in order:"$'\n'"$(diff <(echo "$rows") <(echo "$folders"))"
for f in $folders; do
  grep -q '^# shows: ' "$src/examples/$f/run.sh" || fail "examples/$f/run.sh has no '# shows:' line"
done
links=0
for doc in "$src/README.md" "$src"/docs/*.md; do
  dir="$(dirname "$doc")"
  # [text](target) with a relative target: a file beside the page (its #anchor dropped)
  while IFS= read -r target; do
    target="${target%%#*}"
    [[ -z "$target" || "$target" == *://* || "$target" == mailto:* ]] && continue
    links=$((links + 1))
    [[ -e "$dir/$target" ]] || fail "${doc#"$src"/}: link to $target, which does not exist"
  done < <(grep -o '\](\([^)]*\))' "$doc" | sed 's/^](\(.*\))$/\1/')
done
(( links > 20 )) || fail "only $links relative links found"
# every mention of an example folder (examples/NN-name) in the sources, docs and scripts names one that exists
# (the examples were renumbered once; a merge can bring back an old name)
mentions=0
while IFS=: read -r file name; do
  mentions=$((mentions + 1))
  [[ -d "$src/$name" ]] || fail "${file#"$src"/} mentions $name, which does not exist"
done < <(grep -rHoE 'examples/[0-9][0-9]-[a-z0-9-]+' "$src/README.md" "$src/docs" "$src/bench" "$src/scripts" \
           "$src/tests" "$src/tools" "$src/lib" "$src/examples" --exclude-dir=fixtures 2> /dev/null; \
         grep -rHoE 'examples/[0-9][0-9]-[a-z0-9-]+' "$src/tests/fixtures" --include='*.py' --include='*.md' --include='*.LICENSE' 2> /dev/null)
(( mentions > 10 )) || fail "only $mentions mentions of examples/NN-name found"
finish "docs_examples ($(wc -w <<< "$folders") examples, $links links, $mentions mentions of examples)"

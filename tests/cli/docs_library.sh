#!/usr/bin/env bash
# docs/library.md quotes the C++ examples whole: each block after a line "<!-- examples/cpp/NAME.cpp -->" is
# that file, character for character; every examples/cpp/*.cpp is quoted once, and examples/cpp/CMakeLists.txt
# builds every one (tests/install/run.sh builds and runs them against an installed package).
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$src/tests/cli/lib/common.sh"
page="$src/docs/library.md"
# quoted/NAME.cpp: the lines between the ```cpp after the marker and the closing ```
mkdir quoted
awk -v dir=quoted '
  /^<!-- examples\/cpp\/[a-z_]+\.cpp -->$/ { name = $2; sub(/^examples\/cpp\//, "", name); want = 1; next }
  want == 1 && /^```cpp$/ { out = dir "/" name; printf "" > out; want = 2; next }
  want == 1 { print "marker for " name " not followed by a ```cpp block" > "/dev/stderr"; exit 1 }
  want == 2 && /^```$/ { close(out); want = 0; next }
  want == 2 { print >> out }
' "$page" || fail "docs/library.md: a quoted program is malformed"
quoted="$(cd quoted && ls | sort)"
files="$(cd "$src/examples/cpp" && ls -- *.cpp | sort)"
[[ -n "$files" ]] || fail "no examples/cpp/*.cpp"
[[ "$quoted" == "$files" ]] || fail "docs/library.md quotes [$(echo $quoted)], examples/cpp holds [$(echo $files)]"
for f in $files; do
  [[ -f "quoted/$f" ]] || continue
  [[ "$(grep -c "^<!-- examples/cpp/$f -->\$" "$page")" == 1 ]] || fail "docs/library.md quotes examples/cpp/$f more than once"
  diff -u "$src/examples/cpp/$f" "quoted/$f" > diff.txt || fail "docs/library.md's examples/cpp/$f differs from the file:"$'\n'"$(head -n 20 diff.txt)"
done
built="$(grep -oE '^foreach\(example [a-z_ ]+\)' "$src/examples/cpp/CMakeLists.txt" | sed -E 's/^foreach\(example //; s/\)$//' | tr ' ' '\n' | sed 's/$/.cpp/' | sort)"
[[ "$built" == "$files" ]] || fail "examples/cpp/CMakeLists.txt builds [$(echo $built)], not [$(echo $files)]"
finish "docs_library ($(wc -w <<<"$files") programs quoted)"

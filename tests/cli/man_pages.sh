#!/usr/bin/env bash
# The man pages (cmake/docs.cmake, cmake/man_page.sh) read well: each tool's page renders with
# `man -l` at 80 columns, its NAME line is whole (the tool, " - ", the first line of its --help without
# the pointer to docs/ and the period), every example of its --help stands on a line of its own, whole
# and as typed (ASCII dashes and quotes: a command copied from the page runs), and SEE ALSO names the
# manual installed in share/doc/attnkit. The pages are under BUILD/man/man1, beside BUILD/bin.
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$src/tests/cli/lib/common.sh"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
bin="$(dirname "$(command -v lstm-run)")"
man1="$bin/../man/man1"
if [[ ! -d "$man1" ]]; then
  cache="$bin/../CMakeCache.txt"
  if grep -qE '^(ATTNKIT_SANITIZE:BOOL=ON|ATTNKIT_TOOL_DOCS:BOOL=OFF)' "$cache" 2>/dev/null; then
    echo "man_pages: no man pages in this build (ATTNKIT_TOOL_DOCS off or a sanitizer build): nothing to check"
    exit 0
  fi
  fail "no man pages in $man1 (help2man missing? scripts/setup.sh installs it)"
  finish man_pages
fi
command -v man > /dev/null || { fail "man is not installed (scripts/setup.sh installs man-db)"; finish man_pages; }
# a UTF-8 locale: a plain "-" or "'" in the page would render as a typographic hyphen or quote there
loc=C
locale -a 2>/dev/null | grep -qixE 'c\.utf-?8' && loc=C.UTF-8

# examples HELP: the lines of the "Examples:" footer, leading blanks dropped
examples() {
  awk '/^Examples?:$/ { on = 1; next } on && /^  / { sub(/^ +/, ""); print; next } on { on = 0 }' <<<"$1"
}

pages=0 checked=0
for f in "$src"/tools/*.cpp; do
  t="$(basename "$f" .cpp)"
  command -v "$t" > /dev/null || { fail "tool $t is not built"; continue; }
  page="$man1/$t.1"
  [[ -s "$page" ]] || { fail "no man page $page"; continue; }
  pages=$((pages + 1))
  help="$("$t" --help)"
  summary="$(head -n 1 <<<"$help" | sed -E 's/ \(docs\/[^)]*\)//; s/\.$//')"
  (( ${#summary} >= 10 )) || fail "$t: the first line of --help is no summary: '$summary'"
  MANWIDTH=80 LC_ALL=$loc man -l "$page" 2> err.txt | col -bx > page.txt
  [[ -s page.txt ]] || { fail "$t: man -l renders nothing: $(head -c 300 err.txt)"; continue; }
  [[ ! -s err.txt ]] || fail "$t: man -l warns: $(head -c 300 err.txt)"
  name="$(awk '/^NAME$/ { on = 1; next } on && /^$/ { if (seen) exit; next } on { seen = 1; print }' page.txt |
          sed -E 's/^ +//' | paste -sd ' ' | tr -s ' ')"
  [[ "$name" == "$t - $summary" ]] || fail "$t: NAME is '$name', expected '$t - $summary'"
  # every line of every example is a whole line of the page
  while IFS= read -r ex; do
    checked=$((checked + 1))
    grep -qxF -- "$ex" <(sed -E 's/^ +//; s/ +$//' page.txt) || fail "$t: the example line '$ex' is not a line of its own in the page"
  done < <(examples "$help")
  grep -q '^EXAMPLES$' page.txt || fail "$t: the page has no EXAMPLES section"
  grep -qF "share/doc/attnkit/$t.md" page.txt || fail "$t: SEE ALSO does not name share/doc/attnkit/$t.md"
  [[ -f "$src/docs/$t.md" ]] || fail "$t: no manual docs/$t.md to install"
  # a tool with subcommands: each one's examples are in the page too
  subs="$(awk '/^Subcommands:$/ { on = 1; next } on && /^  [a-z]/ { print $1; next } on { on = 0 }' <<<"$help")"
  for s in $subs; do
    grep -q "^   $s\$" page.txt || fail "$t: no section for the subcommand $s"
    while IFS= read -r ex; do
      checked=$((checked + 1))
      grep -qxF -- "$ex" <(sed -E 's/^ +//; s/ +$//' page.txt) || fail "$t $s: the example line '$ex' is not a line of its own in the page"
    done < <(examples "$("$t" "$s" --help)")
  done
done
(( pages >= 6 && checked >= 20 )) || fail "only $pages pages and $checked example lines checked"
echo "man_pages: $pages pages, $checked example lines (locale $loc)"
finish man_pages

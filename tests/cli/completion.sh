#!/usr/bin/env bash
# Bash completion and man pages of every tool (cmake/bash_completion.sh, cmake/man_page.sh; the build
# makes them into build/completions and build/man, and installs them): generated here from the tools
# on PATH, then the completion functions are called as bash calls them (COMP_WORDS, COMP_CWORD) and
# must offer the subcommands, the options (a subcommand's and the tool's) and the values options list.
# Every tool found is covered, not a hand list. Man pages are checked when help2man is installed.
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
source "$src/tests/cli/lib/common.sh"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
bindir="$(dirname "$(command -v tensor)")"
tools=()
for t in "$bindir"/*; do
  case "$(basename "$t")" in unit_tests|replay_*|bench_*|*.*) continue ;; esac
  [[ -f "$t" && -x "$t" ]] && "$t" --version 2>/dev/null | grep -q '^attnkit ' && tools+=("$(basename "$t")")
done
(( ${#tools[@]} >= 4 )) || fail "found only ${#tools[@]} tools in $bindir"

# offers "LINE": what completing the last word of LINE (a trailing space: a new word) offers
offers() {
  local line="$1" fn
  fn="$(complete -p "${line%% *}" | awk '{ print $(NF - 1) }')"
  read -r -a COMP_WORDS <<<"$line"
  [[ "$line" == *' ' ]] && COMP_WORDS+=("")
  COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
  COMPREPLY=()
  "$fn"
  echo "${COMPREPLY[*]}"
}
expect_offer() {  # LINE EXPECTED
  local got
  got="$(offers "$1")"
  [[ "$got" == "$2" ]] || fail "completing \"$1\" offers \"$got\", expected \"$2\""
}
for t in "${tools[@]}"; do
  bash "$src/cmake/bash_completion.sh" "$bindir/$t" "$t.bash" || { fail "no completion for $t"; continue; }
  source "./$t.bash" || fail "$t.bash does not load"
  # every option of the tool's --help is offered after "-"
  for opt in $("$t" --help | grep -oE '^  (-[a-z],)?--[a-z][a-z0-9-]*' | grep -oE -- '--[a-z0-9-]+'); do
    [[ " $(offers "$t -") " == *" $opt "* ]] || fail "$t: completing \"-\" does not offer $opt"
  done
done
expect_offer "tensor li" "linspace"
expect_offer "tensor r" "randn rand reshape"
expect_offer "tensor randn --s" "--shape --seed --std"
expect_offer "tensor get x.json --for" "--format"
expect_offer "tensor --format " "nested flat"
expect_offer "lstm-run --cell g" "gru"
expect_offer "lstm-run --layout " "torch cs231n"
expect_offer "attn-score --score scaled" "scaled-dot"
expect_offer "tensor get x" ""  # file names: bash's default completion (complete -o default)

if command -v help2man >/dev/null; then
  for t in "${tools[@]}"; do
    bash "$src/cmake/man_page.sh" "$(command -v help2man)" "$bindir/$t" "$t.1" /usr/share/doc/attnkit "${tools[@]}" 2>err.txt || { fail "no man page for $t: $(cat err.txt)"; continue; }
    grep -q "^\.TH \"\?${t^^}\"\? \"\?1" "$t.1" || fail "$t.1: no .TH ${t^^} 1 header: $(grep -m1 '^\.TH' "$t.1")"
    grep -q '^\.SH NAME' "$t.1" && grep -qF -- '\-\-version' "$t.1" || fail "$t.1 lacks NAME or the options"
  done
  grep -q '^\.SS linspace' tensor.1 || fail "tensor.1 lacks the subcommands"
else
  echo "completion: help2man not installed, man pages not checked" >&2
fi
finish completion

#!/usr/bin/env bash
# Every example of every tool's --help runs as written: the tools are found from
# tools/*.cpp, their subcommands from the "Subcommands:" list of their --help, and each help's
# "Examples:" footer (tools::describe) runs line by line, in order, in an empty folder of its own
# (so the examples must make the files they use; a build without SentencePiece skips the --tokenizer spm ones, so
# an example that reads what one writes goes on its line). A line four spaces in continues the one above (a
# trailing backslash on the line above, as in a shell, is allowed).
# Each command must exit 0 and print no error. A subcommand's --help must list the tool's shared
# options. A tool with --threads refuses more than 256 (one rule for all). A tool added later is
# covered as soon as it is built and uses tools::describe.
set -uo pipefail
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
root="$(mktemp -d)"; trap 'rm -rf "$root"' EXIT
failures=0 commands=0 helps=0 threaded=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# examples HELP_TEXT: the commands of the "Examples:" footer, one per line (continuations joined)
examples() {
  awk '/^Examples?:$/ { on = 1; next }
       on && /^    / { sub(/^ +/, ""); sub(/ *\\$/, "", cmd); cmd = cmd " " $0; next }
       on && /^  [^ ]/ { if (cmd != "") print cmd; cmd = $0; sub(/^  /, "", cmd); next }
       on { if (cmd != "") print cmd; cmd = ""; on = 0 }
       END { if (cmd != "") print cmd }' <<< "$1"
}

# run_examples LABEL HELP_TEXT: run them in a fresh folder
run_examples() {
  local label="$1" help="$2" dir cmd n=0
  dir="$(mktemp -d "$root/ex.XXXXXX")"
  while IFS= read -r cmd; do
    n=$((n + 1))
    # a build without SentencePiece refuses --tokenizer spm (tests/cli/spm_*.sh check that refusal)
    [[ "${ATTNKIT_SENTENCEPIECE:-OFF}" != ON && "$cmd" == *"--tokenizer spm"* ]] && continue
    commands=$((commands + 1))
    local rc=0
    (cd "$dir" && bash -c "set -o pipefail; $cmd" > out.txt 2> err.txt) || rc=$?
    if (( rc != 0 )); then
      fail "$label --help example exits $rc: $cmd"$'\n'"$(head -c 600 "$dir/err.txt")"
    elif [[ -s "$dir/err.txt" ]] && grep -qE '^[a-z0-9-]+: ' "$dir/err.txt" && ! grep -qE '^tensor diff: ' "$dir/err.txt"; then
      fail "$label --help example printed an error: $cmd"$'\n'"$(head -c 600 "$dir/err.txt")"
    fi
  done < <(examples "$help")
  (( n > 0 )) || fail "$label --help has no Examples: footer"
}

# Tools whose examples are not run yet, with the reason (their --help must still have examples).
declare -A not_run=()
tools=() all_tools=()
for f in "$src"/tools/*.cpp; do
  t="$(basename "$f" .cpp)"
  command -v "$t" > /dev/null && all_tools+=("$t")
  if [[ -n "${not_run[$t]:-}" ]]; then
    command -v "$t" > /dev/null && [[ -n "$(examples "$("$t" --help 2>&1)")" ]] || fail "$t --help has no Examples: footer"
    echo "note: $t --help examples not run: ${not_run[$t]}" >&2
    continue
  fi
  command -v "$t" > /dev/null || { fail "tool $t is not built"; continue; }
  tools+=("$t")
done
(( ${#tools[@]} >= 3 )) || fail "found only ${#tools[@]} tools in $src/tools"

for t in "${tools[@]}"; do
  help="$("$t" --help 2>&1)" || { fail "$t --help exits $?"; continue; }
  helps=$((helps + 1))
  run_examples "$t" "$help"
  subs="$(awk '/^Subcommands:$/ { on = 1; next } on && /^  [a-z]/ { print $1; next } on { on = 0 }' <<< "$help")"
  for sub in $subs; do
    shelp="$("$t" "$sub" --help 2>&1)" || { fail "$t $sub --help exits $?"; continue; }
    helps=$((helps + 1))
    run_examples "$t $sub" "$shelp"
    # the tool's options that may follow the subcommand are listed in the subcommand's help
    for opt in $(awk '/^Options:$/ { on = 1; next } on && /^  -/ { print } on && /^$/ { on = 0 }' <<< "$help" |
                 grep -oE -- '--[a-z][a-z-]*' | grep -vxE -- '--help|--version'); do
      grep -qE -- "(^|[ ,])$opt([ =]|$)" <<< "$shelp" || fail "$t $sub --help does not list $t's option $opt"
    done
  done
done

for t in "${all_tools[@]}"; do
  # one --threads rule for every tool that has the option: 0..256, more refused (exit 2) before any work
  help="$("$t" --help 2>&1)"
  if grep -qE -- '--threads' <<< "$help"; then
    threaded=$((threaded + 1))
    grep -qF -- '--threads INT:0..256' <<< "$help" || fail "$t --help does not state the --threads bound 0..256"
    for n in 257 100000; do
      rc=0; "$t" --threads $n > "$root/out.txt" 2> "$root/err.txt" || rc=$?
      [[ $rc == 2 && ! -s "$root/out.txt" ]] && grep -qF "threads: $n is not a thread count: give 0 (one per core) to 256" "$root/err.txt" ||
        fail "$t --threads $n: exit $rc, expected 2 with the bound: $(head -c 300 "$root/err.txt")"
    done
  fi
done

# tensor's help in particular: its subcommands, get's options, the 3x4 shape form, arange's usage line
help="$(tensor --help)"
grep -q 'Subcommands:' <<< "$help" || fail "tensor --help lists no subcommands"
for opt in -o --format --pretty --max-elements --allow-nan; do
  grep -qE -- "(^|[ ,])$opt([ ,=]|$)" <<< "$(tensor get --help)" || fail "tensor get --help lacks $opt"
done
grep -q '3x4' <<< "$(tensor linspace --help)" || fail "tensor linspace --help does not show the 3x4 shape form"
grep -q '3x4' <<< "$(tensor arange --help)" || fail "tensor arange --help does not show the 3x4 shape form"
grep -qx 'Usage: tensor arange \[OPTIONS\] \[START\] STOP \[STEP\]' <<< "$(tensor arange --help)" ||
  fail "tensor arange usage line: $(tensor arange --help | grep Usage)"

(( helps >= 10 && commands >= 20 )) || fail "only $helps helps and $commands examples found"
(( threaded >= 2 )) || fail "only $threaded tools with --threads found (lstm-run and attn-score have it)"
if (( failures )); then echo "$failures failure(s) in $helps helps, $commands examples" >&2; exit 1; fi
echo "help_examples: $commands examples of $helps helps (${tools[*]}) ran; $threaded tools hold the --threads bound"

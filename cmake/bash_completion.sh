#!/usr/bin/env bash
# Writes the bash completion of an attnkit tool, read from its --help (and each subcommand's --help):
# subcommands, options (per subcommand, with the tool's own options, which may follow a subcommand),
# and the values of options that list them (CLI11 prints "--cell TEXT:{lstm,gru,rnn}"). Anything else
# completes file names (complete -o default). Usage: bash_completion.sh TOOL_EXECUTABLE OUTPUT
# (cmake/docs.cmake runs it for every tool at build time; tests/cli/completion.sh checks the result).
set -euo pipefail
exe="$1" out="$2"
name="$(basename "$exe")"
fn="_attnkit_${name//[^A-Za-z0-9_]/_}"

# the options of one --help text, one per line; choices as "OPTION CHOICE..." lines on fd 3
section_lines() { awk -v want="$1" '/^[A-Za-z][A-Za-z ]*:$/ { in_s = ($0 == want) ; next } in_s && /^  [^ ]/ { print }'; }
options_of() {
  section_lines "Options:" | while read -r names rest; do
    [[ "$names" == -* ]] || continue
    local list="${names//,/ }"
    echo "$list"
    if [[ "$rest" =~ :\{([^}]*)\} ]]; then
      local choices="${BASH_REMATCH[1]//,/ }"
      for o in $list; do echo "$o $choices" >&3; done
    fi
  done
}

help="$("$exe" --help)"
subs="$(section_lines "Subcommands:" <<<"$help" | awk '{ print $1 }' | tr '\n' ' ')"
choices_file="$(mktemp)"; trap 'rm -f "$choices_file"' EXIT
top="$(options_of <<<"$help" 3>>"$choices_file" | tr '\n' ' ')"
{
  echo "# bash completion for $name (generated from \`$name --help\` by cmake/bash_completion.sh)"
  echo "$fn() {"
  echo '  local cur="${COMP_WORDS[COMP_CWORD]}" prev="" sub="" w'
  echo '  (( COMP_CWORD > 0 )) && prev="${COMP_WORDS[COMP_CWORD-1]}"'
  if [[ -n "${subs// /}" ]]; then
    echo '  for w in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do'
    echo "    case \"\$w\" in ${subs// /|}) sub=\"\$w\"; break ;; esac" | sed 's/|)/)/'
    echo '  done'
  fi
  case_body="$(for s in $subs; do
    sub_opts="$("$exe" "$s" --help | options_of 3>>"$choices_file" | tr '\n' ' ')"
    echo "    $s) words=\"$(echo $sub_opts $top | tr ' ' '\n' | awk '!seen[$0]++' | tr '\n' ' ')\" ;;"
  done)"
  choice_case="$(sort -u -k1,1 "$choices_file" | while read -r opt rest; do echo "    $opt) COMPREPLY=(\$(compgen -W \"$rest\" -- \"\$cur\")); return ;;"; done)"
  if [[ -n "$choice_case" ]]; then
    echo '  case "$prev" in'
    echo "$choice_case"
    echo '  esac'
  fi
  echo '  local words'
  echo '  case "$sub" in'
  [[ -n "$case_body" ]] && echo "$case_body"
  echo "    *) words=\"$top\" ;;"
  echo '  esac'
  if [[ -n "${subs// /}" ]]; then
    echo "  if [[ -z \"\$sub\" && \"\$cur\" != -* ]]; then COMPREPLY=(\$(compgen -W \"$subs\" -- \"\$cur\")); return; fi"
  fi
  echo '  if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "$words" -- "$cur")); fi'
  echo '}'
  echo "complete -o default -F $fn $name"
} > "$out.tmp"
mv "$out.tmp" "$out"

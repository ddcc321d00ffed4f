#!/usr/bin/env bash
# Writes the man page of an attnkit tool with help2man, from its --help and --version:
#   NAME      the tool and the first line of its --help, whole (without the pointer to docs/ and the period)
#   EXAMPLES  the "Examples:" footer of --help, one preformatted command per example (not a filled paragraph)
#   SUBCOMMANDS  for a tool with subcommands, each subcommand's --help
#   SEE ALSO  the other tools' pages and the tool's manual as installed (DOCDIR/TOOL.md)
# Usage: man_page.sh HELP2MAN TOOL_EXECUTABLE OUTPUT.1 DOCDIR [OTHER_TOOL...]   (cmake/docs.cmake runs it)
set -euo pipefail
help2man="$1" exe="$2" out="$3" docdir="${4:?usage: man_page.sh HELP2MAN TOOL OUTPUT.1 DOCDIR [OTHER_TOOL...]}"
shift 4
others=("$@")
name="$(basename "$exe")"
help="$("$exe" --help)"
summary="$(head -n 1 <<<"$help" | sed -E 's/ \(docs\/[^)]*\)//; s/\.$//')"
include="$(mktemp)"; trap 'rm -f "$include"' EXIT

# roff: backslashes and dashes literal, quotes straight (copied commands must run), no line read as a request
roff() { sed -E 's/\\/\\e/g; s/-/\\-/g; s/'"'"'/\\(aq/g; s/`/\\(ga/g; s/^\./\\\&./'; }

# the "Examples:" footer's commands; a line four spaces in continues the one above it
examples() {
  awk '/^Examples?:$/ { on = 1; next }
       on && /^    / { print "  " $0; next }
       on && /^  [^ ]/ { print; next }
       on { on = 0 }' <<<"$1"
}
# one .nf block per example (a command and its continuation lines)
examples_roff() {
  local first=1 line
  while IFS= read -r line; do
    if [[ "$line" != "      "* ]]; then
      (( first )) || echo ".fi"
      first=0
      echo ".PP"
      echo ".nf"
      echo "${line#  }" | roff
    else
      echo "${line#  }" | roff
    fi
  done < <(examples "$1")
  (( first )) || echo ".fi"
}

subs="$(awk '/^[A-Za-z][A-Za-z ]*:$/ { in_s = ($0 == "Subcommands:"); next } in_s && /^  [^ ]/ { print $1 }' <<<"$help")"
{
  if [[ -n "$(examples "$help")" ]]; then
    echo "[=EXAMPLES]"
    examples_roff "$help"
  fi
  if [[ -n "$subs" ]]; then
    echo "[SUBCOMMANDS]"
    for s in $subs; do
      shelp="$("$exe" "$s" --help)"
      echo ".SS $s"
      head -n 1 <<<"$shelp" | roff
      echo ".PP"
      echo ".nf"
      sed -n '2,/^Examples\?:$/p' <<<"$shelp" | sed '/^Examples\?:$/d' | roff
      echo ".fi"
      if [[ -n "$(examples "$shelp")" ]]; then
        echo ".PP"
        echo "Examples:"
        examples_roff "$shelp"
      fi
    done
  fi
  echo "[SEE ALSO]"
  echo ".nh"    # no hyphenated tool names or paths
  echo ".ad l"
  see=()
  for o in "${others[@]}"; do [[ "$o" == "$name" ]] || see+=("$o"); done
  for i in "${!see[@]}"; do
    echo ".BR $(roff <<<"${see[$i]}") (1)$( (( i + 1 < ${#see[@]} )) && echo , || echo .)"
  done
  echo ".PP"
  echo "The manuals (Markdown), installed with the tools:"
  echo ".PP"
  echo ".nf"
  roff <<<"$docdir/$name.md  (this tool's manual)"
  roff <<<"$docdir/tensor-format.md  (the JSON tensor format every tool reads and writes)"
  roff <<<"$docdir/conventions.md  (shapes, exit statuses, references: what all tools share)"
  echo ".fi"
} > "$include"
version="$("$exe" --version | awk '{ print $NF }')"
"$help2man" --no-info --no-discard-stderr --version-string="$name (attnkit) $version" --name="$summary" --include="$include" --output="$out.tmp" "$exe"
mv "$out.tmp" "$out"

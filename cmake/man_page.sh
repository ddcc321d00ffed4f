#!/usr/bin/env bash
# Writes the man page of an attnkit tool with help2man, from its --help and --version; a tool with
# subcommands gets a SUBCOMMANDS section holding each subcommand's --help.
# Usage: man_page.sh HELP2MAN TOOL_EXECUTABLE OUTPUT.1   (cmake/docs.cmake runs it for every tool)
set -euo pipefail
help2man="$1" exe="$2" out="$3"
name="$(basename "$exe")"
help="$("$exe" --help)"
# NAME line: the first sentence of the description, without the pointer to docs/
summary="$(head -n 1 <<<"$help" | sed -E 's/ \(docs\/[^)]*\)//; s/[.;:].*//')"
include="$(mktemp)"; trap 'rm -f "$include"' EXIT
subs="$(awk '/^[A-Za-z][A-Za-z ]*:$/ { in_s = ($0 == "Subcommands:"); next } in_s && /^  [^ ]/ { print $1 }' <<<"$help")"
{
  if [[ -n "$subs" ]]; then
    echo "[SUBCOMMANDS]"
    for s in $subs; do
      echo ".SS $s"
      echo ".nf"
      "$exe" "$s" --help | sed 's/\\/\\e/g; s/^\./\\\&./'
      echo ".fi"
    done
  fi
  echo "[SEE ALSO]"
  echo "The manuals in attnkit's docs/ folder (docs/$name.md) and docs/tensor-format.md."
} > "$include"
version="$("$exe" --version | awk '{ print $NF }')"
"$help2man" --no-info --no-discard-stderr --version-string="$name (attnkit) $version" --name="$summary" --include="$include" --output="$out.tmp" "$exe"
mv "$out.tmp" "$out"

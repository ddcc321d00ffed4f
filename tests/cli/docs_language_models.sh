#!/usr/bin/env bash
# Every command in docs/language-models.md's ```sh blocks runs and exits 0 (tests/cli/lib/doc_commands.sh).
# A build without SentencePiece runs every command but the SentencePiece ones (the lines that say "spm").
if [[ "${ATTNKIT_SENTENCEPIECE:-OFF}" == ON ]]; then
  exec bash "$(dirname "$0")/lib/doc_commands.sh" language-models.md
fi
copy="$(mktemp -d)"; trap 'rm -rf "$copy"' EXIT
mkdir "$copy/docs"
grep -v -e spm -e words.model "$ATTNKIT_SOURCE/docs/language-models.md" > "$copy/docs/language-models.md"
ATTNKIT_SOURCE="$copy" bash "$(dirname "$0")/lib/doc_commands.sh" language-models.md

#!/usr/bin/env bash
# Every command in docs/seq2seq-train.md's ```sh blocks runs and exits 0 (tests/cli/lib/doc_commands.sh).
# A build without SentencePiece runs every command but the SentencePiece ones (the lines that say "spm").
if [[ "${ATTNKIT_SENTENCEPIECE:-OFF}" == ON ]]; then
  exec bash "$(dirname "$0")/lib/doc_commands.sh" seq2seq-train.md
fi
copy="$(mktemp -d)"; trap 'rm -rf "$copy"' EXIT
mkdir "$copy/docs"
grep -v -e spm -e en-de "$ATTNKIT_SOURCE/docs/seq2seq-train.md" > "$copy/docs/seq2seq-train.md"
ATTNKIT_SOURCE="$copy" bash "$(dirname "$0")/lib/doc_commands.sh" seq2seq-train.md

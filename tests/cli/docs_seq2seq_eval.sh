#!/usr/bin/env bash
# Every command in docs/seq2seq-eval.md's ```sh blocks runs and exits 0 (tests/cli/lib/doc_commands.sh).
exec bash "$(dirname "$0")/lib/doc_commands.sh" seq2seq-eval.md

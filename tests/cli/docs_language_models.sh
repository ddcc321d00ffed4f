#!/usr/bin/env bash
# Every command in docs/language-models.md's ```sh blocks runs and exits 0 (tests/cli/lib/doc_commands.sh).
exec bash "$(dirname "$0")/lib/doc_commands.sh" language-models.md

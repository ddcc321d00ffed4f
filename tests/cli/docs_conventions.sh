#!/usr/bin/env bash
# Every command in docs/conventions.md's ```sh blocks runs, exits 0 and prints exactly what the page shows
# (tests/cli/lib/doc_commands.sh --exact).
exec bash "$(dirname "$0")/lib/doc_commands.sh" --exact conventions.md

#!/usr/bin/env bash
# Every command in docs/lstm-run.md's ```sh blocks runs and exits 0 (tests/cli/lib/doc_commands.sh).
# The error messages the manual quotes are checked by tests/cli/lstm_run.sh.
exec bash "$(dirname "$0")/lib/doc_commands.sh" lstm-run.md

#!/usr/bin/env bash
# Every command in docs/graphone-train.md's ```sh blocks runs and exits 0 (tests/cli/lib/doc_commands.sh).
exec bash "$(dirname "$0")/lib/doc_commands.sh" graphone-train.md

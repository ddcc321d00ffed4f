#!/usr/bin/env bash
# docs/pytorch.md: every command of its sh blocks runs and exits 0 (its `tensor diff` lines compare
# attnkit's results with PyTorch's, from the fixtures in tests/fixtures/pytorch).
src="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}"
exec bash "$src/tests/cli/lib/doc_commands.sh" pytorch.md

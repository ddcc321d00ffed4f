#!/usr/bin/env bash
# The worked-example walkthrough: runs every examples/*/run.sh in order and shows what it prints.
# Needs the tools built into build/bin (see README).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export PATH="$here/../build/bin:$PATH"
for script in "$here"/*/run.sh; do
  name="$(basename "$(dirname "$script")")"
  echo "=== $name ==="
  bash "$script"
  echo
done

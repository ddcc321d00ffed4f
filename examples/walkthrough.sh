#!/usr/bin/env bash
# The worked-example walkthrough: runs every examples/*/run.sh in order and shows what it prints.
# Needs the tools built into build/bin (see README).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export PATH="$here/../build/bin:$PATH"
for script in "$here"/*/run.sh; do
  name="$(basename "$(dirname "$script")")"
  echo "=== $name ==="
  rc=0
  bash "$script" || rc=$?
  [[ $rc == 0 || $rc == 77 ]] || exit "$rc"  # 77: the example skipped itself (it says why)
  echo
done

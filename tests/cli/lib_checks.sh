#!/usr/bin/env bash
# The shared checks of tests/cli/lib/common.sh can fail: a negative check (lacks) counts a tool
# that crashed or failed as a failure, where `CMD | grep -q X && fail` passed it.
set -euo pipefail
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
source "$ATTNKIT_SOURCE/tests/cli/lib/common.sh"

crash() { bash -c 'echo "{\"partial\":"; kill -SEGV $$'; }  # a tool that dies by SIGSEGV
exit3() { echo '{}'; return 3; }
for bad in crash exit3 "echo weights" false; do
  before=$fails
  lacks weights "selftest" $bad 2>/dev/null
  (( fails == before + 1 )) || { echo "FAIL: lacks passed '$bad'" >&2; exit 1; }
  fails=$before
done
lacks weights "selftest: a clean run without the pattern" echo '{"context": 1}'
finish lib_checks

#!/usr/bin/env bash
# No lost work (docs/hardening.md): a writer of a large output is SIGKILLed at random moments,
# over and over; after each kill the output is the old complete file or the new complete one,
# byte for byte. A kill can leave its temporary (.NAME.tmp.XXXXXX, at most one per kill); a run
# that finishes leaves none.
# Usage: atomic_write.sh [KILLS]   (kills per writer, default 12; ATTNKIT_KILLS overrides)
set -uo pipefail
kills="${1:-${ATTNKIT_KILLS:-12}}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
total_kills=0
survived=0

now_ms() { date +%s%3N; }

# kill_test LABEL OUT OLD NEW COMMAND...: OUT starts as OLD; COMMAND writes NEW into OUT.
kill_test() {
  local label="$1" out="$2" old="$3" new="$4"
  shift 4
  # How long one whole write takes: kills land anywhere in 0 .. 1.2x of it.
  cp "$old" "$out"
  local t0; t0=$(now_ms)
  "$@" || { echo "FAIL [$label]: the writer failed on its own" >&2; failures=$((failures + 1)); return; }
  local span=$(( $(now_ms) - t0 + 1 ))
  cmp -s "$out" "$new" || { echo "FAIL [$label]: a finished write is not the new file" >&2; failures=$((failures + 1)); return; }
  local leftovers; leftovers=$(ls -A | grep -c "^\.$out\.tmp\." || true)
  [[ $leftovers -eq 0 ]] || { echo "FAIL [$label]: a finished write left $leftovers temporaries" >&2; failures=$((failures + 1)); }
  local old_seen=0 new_seen=0 i
  for ((i = 0; i < kills; i++)); do
    cp "$old" "$out"
    "$@" &
    local pid=$!
    local delay_ms=$(( RANDOM % (span * 12 / 10 + 1) ))
    sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    total_kills=$((total_kills + 1))
    if cmp -s "$out" "$new"; then
      new_seen=$((new_seen + 1)); survived=$((survived + 1))
    elif cmp -s "$out" "$old"; then
      old_seen=$((old_seen + 1)); survived=$((survived + 1))
    else
      echo "FAIL [$label]: after a kill at ${delay_ms} ms, $out is neither the old nor the new file ($(stat -c %s "$out") bytes)" >&2
      failures=$((failures + 1))
    fi
  done
  leftovers=$(ls -A | grep -c "^\.$out\.tmp\." || true)
  if [[ $leftovers -gt $kills ]]; then
    echo "FAIL [$label]: $leftovers temporaries after $kills kills" >&2
    failures=$((failures + 1))
  fi
  echo "atomic_write [$label]: $kills kills in 0..$((span * 12 / 10)) ms: old file kept $old_seen, new file complete $new_seen, temporaries left by kills $leftovers"
  rm -f ."$out".tmp.*
}

tensor randn --shape 2000,2000 --seed 1 -o old.json
tensor randn --shape 2000,2000 --seed 2 -o new.json
kill_test "tensor randn -o" big.json old.json new.json tensor randn --shape 2000,2000 --seed 2 -o big.json

# Outputs that are not regular files are written in place, never replaced by a rename: a FIFO
# stays a FIFO (as root, -o /dev/null must not turn /dev/null into a file), and a symbolic link
# stays a link while the file it points to gets the new contents.
mkfifo pipe
timeout 20 cat pipe > from_pipe.txt &  # (bounded: a regression would leave it waiting for a writer)
reader=$!
tensor arange 3 -o pipe
wait "$reader"
[[ -p pipe && "$(cat from_pipe.txt)" == "[0,1,2]" ]] || { echo "FAIL: -o FIFO: replaced, or read '$(cat from_pipe.txt)'" >&2; failures=$((failures + 1)); }
echo old > target.json
ln -s target.json link.json
tensor arange 3 -o link.json
[[ -L link.json && "$(cat target.json)" == "[0,1,2]" ]] || { echo "FAIL: -o symlink: link replaced or target not written" >&2; failures=$((failures + 1)); }

# The tools that landed later, when they write files of their own (--save-weights, --heatmap).
if [[ -f "${ATTNKIT_SOURCE:-}/tests/cli/atomic_write.inc" ]]; then
  # shellcheck source=/dev/null
  source "${ATTNKIT_SOURCE}/tests/cli/atomic_write.inc"
fi

echo "atomic_write: $survived of $total_kills kills survived, $failures failures"
[[ $failures -eq 0 ]]

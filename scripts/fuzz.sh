#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/*_fuzz.cpp) with clang into build-fuzz/ and runs each
# for SECONDS (default 60), one core each, JOBS targets at a time (--jobs JOBS, default: the number of
# cores, at most 2); with --budget TOTAL, the targets share TOTAL seconds of one core evenly (.ci/run:
# a fixed total, however many targets there are; with 2 jobs it takes TOTAL / 2 seconds of wall time).
# Seeds: tests/fuzz/corpus/NAME and tests/fuzz/regressions/NAME (committed), the JSON files under
# tests/fixtures (small ones), and the JSONTestSuite when ../shared has it. What a run finds is kept
# in build-fuzz/corpus/NAME for the next run. Prints the executions per target and writes them to
# build-fuzz/fuzz-summary.txt.
# A crash stops with exit 1 and names the input: commit it under tests/fuzz/regressions/NAME/ (the
# ctest case fuzz.NAME replays it from then on) and fix the bug.
# The tensor_files target (.npy/.npz/.safetensors readers) is seeded with tests/fixtures/interop's files.
# Usage: scripts/fuzz.sh [--jobs JOBS] [SECONDS | --budget TOTAL] [TARGET...]   (needs: scripts/setup.sh --fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
budget=""
njobs=$(( $(nproc) < 2 ? $(nproc) : 2 ))
if [[ "${1:-}" == --jobs ]]; then njobs="${2:?--jobs JOBS}"; shift 2; (( njobs >= 1 )) || { echo "fuzz: --jobs must be >= 1" >&2; exit 2; }; fi
if [[ "${1:-}" == --budget ]]; then budget="${2:?--budget TOTAL}"; shift 2; seconds=""; else seconds="${1:-60}"; shift || true; fi
command -v clang++ >/dev/null || { echo "fuzz: clang++ missing; run scripts/setup.sh --fuzz" >&2; exit 1; }
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTNKIT_FUZZ=ON \
  -DATTNKIT_TESTS=OFF -DATTNKIT_BENCH=OFF >/dev/null
cmake --build build-fuzz -j 2 --target fuzzers

targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for src in tests/fuzz/*_fuzz.cpp; do
    n="$(basename "$src" .cpp)"
    targets+=("${n%_fuzz}")
  done
fi

if [[ -n "$budget" ]]; then seconds=$(( budget / ${#targets[@]} )); (( seconds > 0 )) || seconds=1; fi

shared="${ATTNKIT_SHARED:-$root/../shared}"
seeds="build-fuzz/seeds"
rm -rf "$seeds"
mkdir -p "$seeds/json"
# Tensor-shaped seeds for every target that reads JSON: fixtures up to 64 KB, the JSONTestSuite.
if [[ -d tests/fixtures ]]; then
  find tests/fixtures -name '*.json' -size -64k -print0 | while IFS= read -r -d '' f; do
    cp "$f" "$seeds/json/fixture_$(echo "$f" | tr '/' '_')"
  done
fi
if [[ -d "$shared/data/jsontestsuite/test_parsing" ]]; then
  cp "$shared"/data/jsontestsuite/test_parsing/*.json "$seeds/json/" 2>/dev/null || true
fi

# One target for $seconds: its line of the summary to build-fuzz/fuzz-NAME.line, exit 1 on a crash.
fuzz_one() {
  local t="$1"
  local exe="build-fuzz/bin/fuzz_$t"
  local corpus="build-fuzz/corpus/$t"
  local artifacts="build-fuzz/artifacts/$t/"
  mkdir -p "$corpus" "$artifacts"
  local dirs=("$corpus") d f
  for d in "tests/fuzz/corpus/$t" "tests/fuzz/regressions/$t"; do
    [[ -d "$d" ]] && dirs+=("$d")
  done
  # The reference target reads "REFERENCE\nDOCUMENT": JSON seeds go under a reference line.
  if [[ "$t" == reference ]]; then
    mkdir -p "$seeds/reference"
    for f in "$seeds"/json/*; do
      [[ -f "$f" ]] && { printf 'x.json#a/b\n'; cat "$f"; } > "$seeds/reference/$(basename "$f")"
    done
    dirs+=("$seeds/reference")
  elif [[ "$t" == tensor_files ]]; then
    dirs+=("tests/fixtures/interop")
  elif [[ "$(ls -A "$seeds/json")" ]]; then
    dirs+=("$seeds/json")
  fi
  local log="build-fuzz/fuzz-$t.log"
  echo "fuzz: $t for ${seconds}s (seeds: ${dirs[*]})" >&2
  set +e
  TMPDIR="$root/build-fuzz" "$exe" "${dirs[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts" >"$log" 2>&1
  local rc=$?
  set -e
  local execs cov
  execs="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1 || true)"
  cov="$(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | grep -oE '[0-9]+' || true)"
  echo "$t: ${execs:-?} executions in ${seconds}s, coverage ${cov:-?} edges, corpus $(ls "$corpus" | wc -l) inputs, exit $rc" \
    > "build-fuzz/fuzz-$t.line"
  if [[ $rc -ne 0 ]]; then
    {
      echo "fuzz: $t FAILED; the input is in $artifacts:"
      ls "$artifacts"
      grep -m 5 -E 'ERROR|SUMMARY|property broken|runtime error' "$log" || true
      echo "fuzz: commit it under tests/fuzz/regressions/$t/ (replayed by ctest fuzz.$t), then fix"
    } >&2
    return 1
  fi
}

for t in "${targets[@]}"; do
  [[ -x "build-fuzz/bin/fuzz_$t" ]] || { echo "fuzz: no target $t" >&2; exit 2; }
  rm -f "build-fuzz/fuzz-$t.line"
done
# JOBS targets at a time, each on its own core (libFuzzer runs one process per target).
pids=()
for t in "${targets[@]}"; do
  fuzz_one "$t" &
  pids+=($!)
  while (( $(jobs -rp | wc -l) >= njobs )); do wait -n || true; done
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
summary="build-fuzz/fuzz-summary.txt"
: > "$summary"
for t in "${targets[@]}"; do
  cat "build-fuzz/fuzz-$t.line" 2>/dev/null | tee -a "$summary" || { echo "$t: no result" | tee -a "$summary"; status=1; }
done
rm -f build-fuzz/attnkit-fuzz-reference-*.json  # the reference target's documents
exit $status

#!/usr/bin/env bash
# The JSONTestSuite corpus (../shared/data/jsontestsuite/test_parsing, 318 files) through every
# tool argument that reads a tensor, weights or a graphone model (under the sanitizers, one per reader), each run
# under a timeout:
#   - no crash (exit >= 128, or a sanitizer report), no hang (timeout);
#   - every n_ file: exit 1 with the position, "FILE:LINE:COL: ..." on stderr;
#   - every y_ file: read (exit 0), or exit 1 naming the path and saying why: "not a tensor",
#     "is a bundle" (or, for a tool that needs a particular tensor, its shape problem);
#   - i_ files: anything but a crash or a hang; what the reader does with each is the table in
#     docs/hardening.md, which this test checks is current (--table prints it).
# Skipped (exit 77) where the corpus is missing.
# Usage: jsontestsuite.sh [--part K/N] [--table]
#   --part K/N  runs the K-th of N interleaved shares of the (probe, file) runs, one run at a time
#               (ctest registers N such tests, so that ctest -j balances them against the rest of the
#               suite); part 1 also does the deep-nesting case and the docs/hardening.md i_ table check.
#               Without --part: every run, ATTNKIT_CORPUS_JOBS (default 2) at a time.
set -uo pipefail
part=1 parts=1 table=0
while (($#)); do
  case "$1" in
    --part)
      [[ "${2:-}" =~ ^([0-9]+)/([0-9]+)$ ]] && ((BASH_REMATCH[1] >= 1 && BASH_REMATCH[1] <= BASH_REMATCH[2])) ||
        { echo "jsontestsuite: --part K/N with 1 <= K <= N, got '${2:-}'" >&2; exit 2; }
      part="${BASH_REMATCH[1]}" parts="${BASH_REMATCH[2]}"; shift 2 ;;
    --table) table=1; shift ;;
    *) echo "jsontestsuite: unknown argument '$1' (usage: jsontestsuite.sh [--part K/N] [--table])" >&2; exit 2 ;;
  esac
done
corpus="${ATTNKIT_SHARED:-}/data/jsontestsuite/test_parsing"
if [[ -z "${ATTNKIT_SHARED:-}" || ! -d "$corpus" ]]; then
  echo "jsontestsuite: skipped: no corpus at \${ATTNKIT_SHARED}/data/jsontestsuite/test_parsing" >&2
  exit 77
fi
per_run_timeout="${ATTNKIT_CORPUS_TIMEOUT:-20}"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
fixtures="${ATTNKIT_SOURCE:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/fixtures"

# Copies under names a reference can hold ('#' starts a member name in PATH#NAME).
mkdir "$work/c"
for f in "$corpus"/*.json; do
  b="$(basename "$f")"
  cp "$f" "$work/c/${b//#/_hash_}"
done
echo '[[1, 2], [3, 4]]' > "$work/good.json"

# Probes: NAME|ROLE|REFUSAL|COMMAND, with {} for the corpus file. REFUSAL is the exit status of a
# refused input (1; tensor diff says 2, "trouble", like diff(1)). ROLE says what a y_ file may do:
#   any      read (exit 0), or refused as not a tensor / a bundle, naming the path
#   shaped   as any, or read as a tensor and refused for its shape (the tool needs a particular one)
#   weights  read, or refused with a message that names the path (a weights file is a bundle of
#            named tensors: the loader says what is missing or wrong)
fx="$fixtures"
probes=(
  "tensor show|any|1|tensor show {}"
  "tensor show (stdin)|any|1|tensor show - < {}"
  "tensor get|any|1|tensor get {}"
  "tensor diff (A)|shaped|2|tensor diff {} $work/good.json"
  "tensor diff (B)|shaped|2|tensor diff $work/good.json {}"
  "tensor reshape|shaped|1|tensor reshape {} --shape -1"
)
if command -v lstm-run >/dev/null && [[ -f "$fx/recurrent/torch_lstm_1layer.json" ]]; then
  lstm="$fx/recurrent/torch_lstm_1layer.json"
  probes+=("lstm-run INPUT|shaped|1|lstm-run {} --weights $lstm#weights")
  probes+=("lstm-run --weights|weights|1|lstm-run $lstm#x --weights {}")
  probes+=("lstm-run --weights --layout cs231n|weights|1|lstm-run $lstm#x --weights {} --layout cs231n")
  probes+=("lstm-run --lengths|shaped|1|lstm-run $lstm#x --weights $lstm#weights --lengths {}")
fi
if command -v attn-score >/dev/null && [[ -f "$fx/attention.json" ]]; then
  att="$fx/attention.json"
  probes+=("attn-score --query|shaped|1|attn-score --query {} --keys $work/good.json")
  probes+=("attn-score --keys|shaped|1|attn-score --query $work/good.json --keys {}")
  probes+=("attn-score --mask|shaped|1|attn-score --query $work/good.json --keys $work/good.json --mask {}")
  probes+=("attn-score --weights (general)|weights|1|attn-score --query $att#general/q --keys $att#general/k --score general --weights {}")
  probes+=("attn-score --weights (multi-head)|weights|1|attn-score --self $att#mha_self/query --heads 2 --weights {}")
fi
if command -v seq2seq-train >/dev/null && command -v seq2seq-eval >/dev/null; then
  # the graphone model reader (graphone-train's files), behind a tiny checkpoint it rescores
  seq2seq-train --task reverse --model lstm --hidden 4 --embed 4 --steps 1 --threads 1 --save "$work/s2s.json" >/dev/null &&
    printf '1 2\t2 1\n' > "$work/pairs.tsv" ||
    { echo "jsontestsuite: cannot train the checkpoint of the --rescore-graphone probe" >&2; exit 1; }
  probes+=("seq2seq-eval --rescore-graphone|weights|1|seq2seq-eval $work/s2s.json $work/pairs.tsv --strategy beam --beam 2 --threads 1 --rescore-graphone {}")
fi

# Under the sanitizers (CI's second pass, where each process costs about 0.3 s) one probe per reader: the JSON
# reader from a file and from standard input, the weights loaders of lstm-run and attn-score, and the graphone
# model reader; the release pass runs every probe.
if [[ -n "${ASAN_OPTIONS:-}" ]]; then
  few=()
  for p in "${probes[@]}"; do
    case "${p%%|*}" in
      "tensor show" | "tensor show (stdin)" | "lstm-run --weights" | "attn-score --weights (multi-head)" | \
        "seq2seq-eval --rescore-graphone") few+=("$p") ;;
    esac
  done
  probes=("${few[@]}")
fi

failures=0
outcomes=/dev/null  # each probe's "KIND STATUS" lines (see run_probe_over_corpus)
fail() {
  echo "FAIL [$1] $2: $3" >&2
  failures=$((failures + 1))
}

# Runs one probe on one file; sets rc and err. The command is run by timeout(1) directly, not through
# `bash -c` (one process less per run; under ASan a run is a few tens of milliseconds, so this counts):
# the words of COMMAND are split on spaces (no word of a probe holds one), and a trailing "< {}" is
# done here as the run's standard input.
run_probe() {
  local -a argv
  read -ra argv <<<"$1"
  local n=${#argv[@]} input=""
  if ((n >= 2)) && [[ "${argv[n - 2]}" == "<" ]]; then
    input="${argv[n - 1]//\{\}/$2}"
    unset 'argv[n-1]' 'argv[n-2]'
  fi
  argv=("${argv[@]//\{\}/$2}")
  if [[ -n "$input" ]]; then
    err="$(timeout -k 5 "$per_run_timeout" "${argv[@]}" 2>&1 >/dev/null <"$input")"
  else
    err="$(timeout -k 5 "$per_run_timeout" "${argv[@]}" 2>&1 >/dev/null)"
  fi
  rc=$?
}

check() {
  local probe="$1" role="$2" refusal="$3" cmd="$4" file="$5"
  local b="${file##*/}"
  local shown="$file"
  [[ "$cmd" == *"- < {}"* ]] && shown="<stdin>"
  run_probe "$cmd" "$file"
  local kind="${b%%_*}"
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then fail "$probe" "$b" "hang (no exit within ${per_run_timeout}s)"; return; fi
  if [[ $rc -ge 128 ]]; then fail "$probe" "$b" "crash (exit $rc): $err"; return; fi
  # (bash's own matching, here and below: no grep process per run)
  if [[ "$err" =~ Sanitizer|runtime\ error: ]]; then fail "$probe" "$b" "sanitizer report: $err"; return; fi
  if [[ $rc -ne 0 && $rc -ne 1 && $rc -ne $refusal ]]; then fail "$probe" "$b" "exit $rc (expected 0, 1 or $refusal): $err"; return; fi
  echo "$kind $rc" >>"$outcomes"
  case "$kind" in
    n)
      [[ $rc -eq $refusal ]] || { fail "$probe" "$b" "invalid JSON accepted"; return; }
      [[ "$err" == *"$shown:"* && "$err" =~ :[0-9]+:[0-9]+:\  ]] ||
        fail "$probe" "$b" "no FILE:LINE:COL: position in: $err"
      ;;
    y)
      [[ $rc -eq 0 ]] && return
      if [[ "$role" == shaped && "$err" =~ shape|disagree|dimension ]]; then return; fi
      [[ "$err" == *"$shown"* ]] || { fail "$probe" "$b" "refusal does not name the path: $err"; return; }
      if [[ "$err" =~ not\ a\ tensor|is\ a\ bundle ]]; then return; fi
      if [[ "$role" == weights ]]; then return; fi
      fail "$probe" "$b" "valid JSON refused without saying why: $err"
      ;;
    i)
      [[ -n "$err" || $rc -eq 0 ]] || fail "$probe" "$b" "exit 1 without a message"
      ;;
  esac
}

# The first bytes of a file, printable: ASCII as is, other bytes as \xNN.
show_bytes() {
  local out="" b
  for b in $(head -c 32 "$1" | od -An -v -tu1); do
    if ((b >= 32 && b < 127 && b != 124 && b != 96 && b != 92)); then out+="$(printf "\\$(printf '%03o' "$b")")"
    else out+="$(printf '\\x%02x' "$b")"; fi
  done
  (($(stat -c %s "$1") > 32)) && out+="..."
  printf '%s' "$out"
}

# The i_ table: what the reader does with each implementation-defined file (`tensor get FILE`).
i_table() {
  echo "| file | first bytes | \`tensor get FILE\` |"
  echo "|---|---|---|"
  for f in "$work"/c/i_*.json; do
    local b="${f##*/}"
    run_probe "tensor get {}" "$f"
    local what
    if [[ $rc -eq 0 ]]; then
      what="exit 0: $(tensor get "$f" 2>/dev/null | head -c 60)"
    else
      what="exit $rc: ${err//$f/FILE}"
    fi
    what="${what//|/\\|}"
    echo "| \`$b\` | \`$(show_bytes "$f")\` | ${what:0:110} |"
  done
}

if ((table)); then
  i_table
  exit 0
fi

files=("$work"/c/*.json)
# One probe over the corpus (this part's share of it: run number i * files + j, counted over every
# probe and file, belongs to part 1 + that number mod N, so that each part gets every probe and every
# kind of file), in the background: failures to r.I.fail, outcomes to r.I.out.
runs=0
run_probe_over_corpus() {
  local i="$1" probe role refusal cmd j
  IFS='|' read -r probe role refusal cmd <<<"${probes[$i]}"
  outcomes="$work/r.$i.out"
  : >"$outcomes"
  for j in "${!files[@]}"; do
    (((i * ${#files[@]} + j) % parts == part - 1)) && check "$probe" "$role" "$refusal" "$cmd" "${files[$j]}"
  done
}
# A part is one ctest case among others (ctest -j runs several): one run at a time.
if ((parts > 1)); then jobs_max="${ATTNKIT_CORPUS_JOBS:-1}"; else jobs_max="${ATTNKIT_CORPUS_JOBS:-2}"; fi
for i in "${!probes[@]}"; do
  run_probe_over_corpus "$i" 2>"$work/r.$i.fail" &
  while (($(jobs -rp | wc -l) >= jobs_max)); do wait -n; done
done
wait
for i in "${!probes[@]}"; do
  cat "$work/r.$i.fail" >&2
  failures=$((failures + $(grep -c '^FAIL' "$work/r.$i.fail")))
done

# Deep nesting (100 000 '['), huge and overflowing declared shapes: refused without a crash (part 1).
if ((part == 1)); then
  printf '%100000s' '' | tr ' ' '[' > "$work/deep.json"
  run_probe "tensor show {}" "$work/deep.json"
  [[ $rc -eq 1 && "$err" =~ deep\.json:1:[0-9]*:\ nesting\ deeper\ than ]] || fail "deep" "100000 x [" "exit $rc: $err"
fi

total=$(( ${#files[@]} * ${#probes[@]} ))
if ((parts > 1)); then
  echo "jsontestsuite: part $part/$parts: $(cat "$work"/r.*.out | wc -l) of the $total runs (${#files[@]} files x ${#probes[@]} probes)"
else
  echo "jsontestsuite: ${#files[@]} files x ${#probes[@]} probes = $total runs"
fi
for p in "${probes[@]}"; do echo "  probe: ${p%%|*}"; done
cat "$work"/r.*.out | sort | uniq -c | while read -r count kind status; do
  echo "  ${kind}_ files, exit $status: $count runs"
done

# docs/hardening.md holds the i_ table between markers; it must match what the reader does now (part 1).
doc="${ATTNKIT_SOURCE:-}/docs/hardening.md"
if ((part == 1)) && [[ -f "$doc" ]]; then
  diff <(sed -n '/<!-- i-table begin -->/,/<!-- i-table end -->/p' "$doc" | sed '1d;$d') <(i_table) >"$work/table.diff" ||
    { fail "docs" "docs/hardening.md" "i_ table is out of date (regenerate with: tests/cli/jsontestsuite.sh --table):"; cat "$work/table.diff" >&2; }
fi
if [[ $failures -gt 0 ]]; then
  echo "jsontestsuite: $failures failures" >&2
  exit 1
fi
echo "jsontestsuite: ok"

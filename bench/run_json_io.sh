#!/usr/bin/env bash
# JSON tensor I/O benchmark (docs/benchmarks.md, "JSON tensors"): a [64, 100, 512] float32 tensor
# as nested JSON (~36 MB), read and written on one core by attnkit and by nlohmann::json's DOM
# (the baseline). Every measurement runs in a fresh process, so that its peak resident memory
# (getrusage ru_maxrss) is its own; attnkit and nlohmann take turns, round after round.
#   bench/run_json_io.sh [--rounds 3] [--reps 5]
# Prints a Markdown table (the best MB/s of all rounds, the largest peak memory) and the targets:
# read and write >= 250 MB/s, peak memory < 2 x (text + tensor).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3
reps=5
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    *) echo "usage: bench/run_json_io.sh [--rounds N] [--reps N]" >&2; exit 2 ;;
  esac
done
[[ -x build/bench/json_io ]] || scripts/build.sh >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
build/bench/json_io gen "$work/x.json" >/dev/null  # generated, never committed
for ((r = 0; r < rounds; ++r)); do
  for impl in attnkit nlohmann; do
    build/bench/json_io read "$impl" "$work/x.json" --reps "$reps" >>"$work/results.jsonl"
    build/bench/json_io write "$impl" --reps "$reps" >>"$work/results.jsonl"
  done
done
python3 - "$work/results.jsonl" "$rounds" "$reps" <<'EOF'
import json, os, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
best = {}
for r in rows:
    key = (r["op"], r["impl"])
    b = best.setdefault(key, {"mb_per_s": 0, "peak_rss_mb": 0, "wall_mb_per_s": 0})
    b["mb_per_s"] = max(b["mb_per_s"], r["mb_per_s"])
    b["wall_mb_per_s"] = max(b["wall_mb_per_s"], r["text_mb"] / min(r["wall_s"]))
    b["peak_rss_mb"] = max(b["peak_rss_mb"], r["peak_rss_mb"])
    b["text_mb"], b["tensor_mb"] = r["text_mb"], r["tensor_mb"]
a_read = [r for r in rows if r["op"] == "read" and r["impl"] == "attnkit"][0]
limit = 2 * (a_read["text_mb"] + a_read["tensor_mb"])
print(f"tensor [64, 100, 512] float32 ({a_read['tensor_mb']:.1f} MB), nested JSON {a_read['text_mb']:.1f} MB "
      f"(attnkit's text; nlohmann writes {best[('write', 'nlohmann')]['text_mb']:.1f} MB)")
print("MB/s: text bytes over the best time; nlohmann's count its own, longer text (17 significant digits)")
print(f"{sys.argv[2]} rounds x {sys.argv[3]} reps, one core; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
print()
print("| | attnkit | nlohmann DOM | attnkit / nlohmann | target |")
print("|---|---|---|---|---|")
for op in ("read", "write"):
    a, n = best[(op, "attnkit")], best[(op, "nlohmann")]
    ok = "met" if a["mb_per_s"] >= 250 else "MISSED"
    print(f"| {op} MB/s (CPU time) | {a['mb_per_s']:.0f} | {n['mb_per_s']:.0f} | {a['mb_per_s'] / n['mb_per_s']:.1f}x | >= 250: {ok} |")
    print(f"| {op} MB/s (wall time) | {a['wall_mb_per_s']:.0f} | {n['wall_mb_per_s']:.0f} | {a['wall_mb_per_s'] / n['wall_mb_per_s']:.1f}x | |")
for op in ("read", "write"):
    a, n = best[(op, "attnkit")], best[(op, "nlohmann")]
    ok = "met" if a["peak_rss_mb"] < limit else "MISSED"
    print(f"| {op} peak memory MB | {a['peak_rss_mb']:.0f} | {n['peak_rss_mb']:.0f} | {a['peak_rss_mb'] / n['peak_rss_mb']:.2f}x | < {limit:.0f}: {ok} |")
EOF

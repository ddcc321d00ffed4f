#!/usr/bin/env bash
# Data-parallel scaling on this machine (docs/distributed.md): the same global batch trained by one process
# with 2 threads and by mpirun -n 2 with 1 thread each (each bound to its core), on a model the size of
# bench/g2p.sh's (bidirectional LSTM 128 per direction, embeddings 64, additive attention, batch 64) on the
# reverse task; prints steps/s and the share of the wall time spent summing gradients (the summary's
# reduce_seconds / seconds, rank 0's), then MPI's loopback ping-pong (build/bench/mpi_pingpong) and the
# straight-line fit seconds = latency + bytes / bandwidth that the cost model uses.
# Needs a quiet machine (nothing else running) for figures worth writing down.
# Usage: bench/mpi_scaling.sh [--steps N] [--fast | --deterministic]   (default: both reductions)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${ATTNKIT_BIN:-$here/../build/bin}"
bench="${ATTNKIT_BENCH_BIN:-$here/../build/bench}"
out="${ATTNKIT_BENCH_OUT:-/tmp/mpi-scaling}"
steps=200
modes=(fast deterministic)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --fast) modes=(fast); shift ;;
    --deterministic) modes=(deterministic); shift ;;
    *) echo "usage: $0 [--steps N] [--fast | --deterministic]" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
flags=()
if mpirun --version 2>&1 | grep -q "Open MPI"; then flags=(--allow-run-as-root --oversubscribe); fi
model=(--task reverse --vocab-size 30 --min-len 4 --max-len 10 --train-size 20000 --valid-size 0 --model lstm
       --bidirectional --attention additive --hidden 128 --embed 64 --batch 64 --lr 0.003 --seed 1
       --log-every "$steps" --steps "$steps")
# Both runs train on the same batches, so their training throughputs (the metrics' tokens_per_s over the one
# window of the run, evaluation and start-up excluded) compare the same work; steps/s comes from the summary
# of the K=2 run (its "seconds") and the throughput ratio.
"$bin/seq2seq-train" "${model[@]}" --threads 2 --save "$out/k1.json" --metrics "$out/k1.jsonl" > "$out/k1.summary"
for mode in "${modes[@]}"; do
  extra=()
  [[ $mode == deterministic ]] && extra=(--deterministic-reduce)
  mpirun "${flags[@]}" -n 2 --bind-to core --map-by core "$bin/seq2seq-train" "${model[@]}" --threads 1 "${extra[@]}" \
    --save "$out/k2.json" --metrics "$out/k2-$mode.jsonl" > "$out/k2-$mode.summary"
  python3 - "$out" "$mode" "$steps" <<'PY'
import json, sys
out, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
k1 = json.loads(open(f"{out}/k1.jsonl").read().splitlines()[-1])["tokens_per_s"]
k2 = json.loads(open(f"{out}/k2-{mode}.jsonl").read().splitlines()[-1])["tokens_per_s"]
s = json.load(open(f"{out}/k2-{mode}.summary"))
k2_steps = steps / s["seconds"]
print(json.dumps({"reduce": mode, "K1_2threads_tokens_per_s": round(k1), "K2_1thread_tokens_per_s": round(k2),
                  "K1_steps_per_s": round(k2_steps * k1 / k2, 2), "K2_steps_per_s": round(k2_steps, 2),
                  "K2_reduce_share": round(s["reduce_seconds"] / s["seconds"], 4)}))
PY
done
mpirun "${flags[@]}" -n 2 --bind-to core "$bench/mpi_pingpong" > "$out/pingpong.jsonl"
python3 - "$out/pingpong.jsonl" <<'PY'
import json, sys
pts = [json.loads(l) for l in open(sys.argv[1])]
xs = [p["bytes"] for p in pts]; ys = [p["seconds"] for p in pts]
n = len(xs); mx = sum(xs) / n; my = sum(ys) / n
slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
small = min(ys)
print(json.dumps({"pingpong_latency_s": small, "pingpong_bandwidth_GBps": round(1 / slope / 1e9, 3)}))
PY

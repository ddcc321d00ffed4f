#!/usr/bin/env python3
"""The data-parallel cost model of docs/distributed.md, evaluated for 8-64 nodes on 10/25/100 Gb/s links.

Per step, with K nodes, a global batch whose compute takes T_c seconds on one node, G bytes of gradients:
  ring allreduce   T_ar(K) = 2 (K - 1) / K * G / bw + 2 (K - 1) * alpha       (2 (K - 1) messages in a ring)
  no overlap       T(K) = T_c / K + T_ar(K)
  overlapped       T(K) = T_c / K + max(T_ar(K) - f * T_c / K, T_ar_last)   (buckets of B bytes summed while
                   the backward (a share f of the step) goes on; the last bucket cannot hide; each bucket
                   pays the latency term, T_ar counted with ceil(G / B) buckets)
  speedup S(K) = T_c / T(K); the efficiency is S(K) / K. The step time is smallest at
  K* = sqrt((T_c - 2 G / bw) / (2 alpha)) (no overlap; beyond it more nodes make the step slower).
Usage: python3 bench/mpi_cost_model.py [--markdown]   (the inputs are the constants below, with their sources)
"""
import math
import sys

# (name, gradient bytes, compute seconds of the global batch on one node)
MODELS = [
    # bench/g2p.sh's LSTM: ~1.01 M parameters (formula of seq2seq-train's size check, 29 + 73 symbols);
    # batch 64 words, 512 target tokens at 12,299 tokens/s on 2 threads (docs/benchmarks.md)
    ("G2P LSTM (1.0 M params, batch 64)", 1.01e6 * 4, 512 / 12299),
    # nn.Transformer 6 + 6, d 512, ff 2048: 45.7 M parameters (docs/benchmarks.md); 8192 target tokens a step,
    # 6 * 44.1 M (non-embedding) * 8192 FLOP at 150 GFLOP/s (this machine's 2-thread sgemm, docs/benchmarks.md)
    ("Transformer 6+6 d512 (45.7 M params, 8192 tokens)", 45.7e6 * 4, 6 * 44.1e6 * 8192 / 150e9),
]
# (name, bandwidth bytes/s, latency s): line rates; latencies typical of TCP over 10 GbE, RoCE at 25 Gb/s,
# InfiniBand at 100 Gb/s
LINKS = [("10 Gb/s", 10e9 / 8, 30e-6), ("25 Gb/s", 25e9 / 8, 10e-6), ("100 Gb/s", 100e9 / 8, 2e-6)]
NODES = [8, 16, 32, 64]
BACKWARD_SHARE = 2 / 3   # the backward's share of a step
BUCKET = 25e6            # bytes per bucket (PyTorch DDP's default)


def allreduce(k, nbytes, bw, alpha, buckets=1):
    return 2 * (k - 1) / k * nbytes / bw + 2 * (k - 1) * alpha * buckets


def step(k, nbytes, tc, bw, alpha, overlap):
    if not overlap:
        return tc / k + allreduce(k, nbytes, bw, alpha)
    b = max(1, math.ceil(nbytes / BUCKET))
    total = allreduce(k, nbytes, bw, alpha, b)
    last = allreduce(k, min(nbytes, BUCKET), bw, alpha)
    return tc / k + max(total - BACKWARD_SHARE * tc / k, last)


def main():
    for name, nbytes, tc in MODELS:
        print(f"\n{name}: gradients {nbytes / 1e6:.1f} MB, one node {tc * 1e3:.1f} ms a step\n")
        print("| link | " + " | ".join(f"K={k}" for k in NODES) + " | best K (no overlap) |")
        print("|---|" + "---|" * (len(NODES) + 1))
        for lname, bw, alpha in LINKS:
            cells = []
            for k in NODES:
                plain = tc / step(k, nbytes, tc, bw, alpha, False)
                over = tc / step(k, nbytes, tc, bw, alpha, True)
                cells.append(f"{plain:.1f}x / {over:.1f}x")
            num = tc - 2 * nbytes / bw
            best = "1 (never pays)" if num <= 0 else f"{math.sqrt(num / (2 * alpha)):.0f}"
            print(f"| {lname} | " + " | ".join(cells) + f" | {best} |")


if __name__ == "__main__":
    main()

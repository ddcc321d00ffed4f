#!/usr/bin/python3
"""PyTorch's side of bench/sdpa_backward_bench.cpp: causal self-attention core, forward + autograd backward.

  /usr/bin/python3 bench/sdpa_backward_torch.py --T 4096 [--E 512] [--heads 8] [--threads 2]

PyTorch 1.13 on CPU has no fused attention: softmax(q k^T / sqrt(HS), causal) v with autograd, which
holds [NH, T, T] scores, weights and their gradients. Prints one JSON line like the C++ bench.
"""
import argparse
import json
import math
import resource
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--T", type=int, default=4096)
ap.add_argument("--E", type=int, default=512)
ap.add_argument("--heads", type=int, default=8)
ap.add_argument("--threads", type=int, default=2)
a = ap.parse_args()
torch.set_num_threads(a.threads)
T, NH, HS = a.T, a.heads, a.E // a.heads
g = torch.Generator().manual_seed(1)
q, k, v = (torch.randn(1, NH, T, HS, generator=g).requires_grad_(True) for _ in range(3))
dout = torch.randn(1, NH, T, HS, generator=g)
allowed = torch.ones(T, T, dtype=torch.bool).tril()
t0 = time.perf_counter()
out = torch.softmax(((q @ k.transpose(-2, -1)) / math.sqrt(HS)).masked_fill(~allowed, float("-inf")), -1) @ v
t1 = time.perf_counter()
out.backward(dout)
t2 = time.perf_counter()
print(json.dumps({"T": T, "E": a.E, "heads": NH, "threads": a.threads, "causal": True, "forward_s": round(t1 - t0, 4),
                  "backward_s": round(t2 - t1, 4),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))

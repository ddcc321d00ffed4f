#!/usr/bin/python3
"""Layer kernels, forward + backward: attnkit (build/bench/layers_bench) vs PyTorch autograd,
interleaved, same sizes and threads.

  /usr/bin/python3 bench/layers_vs_torch.py [--build build] [--rounds 5] [--reps 20] [--threads 1]

Ops and sizes (float32, rows x cols, the op along the last axis):
  ce       F.cross_entropy(logits, targets, label_smoothing=0.1) + backward      [4096, 1000]
  ln       F.layer_norm(x, [C], w, b) + backward(dy) (dx, dw, db)                [4096, 512]
  gelu     F.gelu(x) (exact erf) + backward(dy)                                  [4096, 2048]
  softmax  F.softmax(x, -1) + backward(dy)                                       [4096, 1000]
Each round runs attnkit (best of --reps calls inside the process, after a warm-up call) and then
PyTorch (best of the same number, after a warm-up); the summary is the median ratio
attnkit / PyTorch over rounds (< 1: attnkit faster).
"""
import argparse
import os
import statistics
import time

from bench_common import bench_binary, import_torch, run_json

SIZES = {"ce": (4096, 1000), "ln": (4096, 512), "gelu": (4096, 2048), "softmax": (4096, 1000)}


def torch_best(torch, op, R, C, reps):
    F = torch.nn.functional
    torch.manual_seed(0)
    x = torch.randn(R, C, requires_grad=True)
    dy = torch.randn(R, C)
    w = torch.randn(C, requires_grad=True)
    b = torch.randn(C, requires_grad=True)
    t = (torch.arange(R) * 7919) % C

    def once():
        x.grad = None
        w.grad = None
        b.grad = None
        if op == "ce":
            F.cross_entropy(x, t, label_smoothing=0.1).backward()
        elif op == "ln":
            F.layer_norm(x, [C], w, b, 1e-5).backward(dy)
        elif op == "gelu":
            F.gelu(x).backward(dy)
        else:
            F.softmax(x, -1).backward(dy)

    once()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        once()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build", default=os.path.join(here, "..", "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ops", nargs="+", default=list(SIZES))
    a = ap.parse_args()
    binary = bench_binary(a.build, "layers_bench")
    torch = import_torch(a.threads)
    if torch is not None:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; attnkit {a.threads} threads; "
              f"{a.rounds} interleaved rounds, best of {a.reps} each")
    for op in a.ops:
        R, C = SIZES[op]
        mine, theirs, ratios = [], [], []
        for _ in range(a.rounds):
            m = run_json(binary, op=op, rows=R, cols=C, threads=a.threads, reps=a.reps)["best_s"]
            mine.append(m)
            if torch is not None:
                p = torch_best(torch, op, R, C, a.reps)
                theirs.append(p)
                ratios.append(m / p)
        line = f"{op:8s} [{R}, {C}]  attnkit {statistics.median(mine) * 1e3:8.3f} ms"
        if ratios:
            line += f"  torch {statistics.median(theirs) * 1e3:8.3f} ms  ratio {statistics.median(ratios):.2f}"
        print(line)


if __name__ == "__main__":
    main()

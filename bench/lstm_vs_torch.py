#!/usr/bin/python3
"""LSTM forward: attnkit vs PyTorch nn.LSTM, interleaved, same sizes and threads, float32.

  /usr/bin/python3 bench/lstm_vs_torch.py [--build build] [--rounds 7] [--reps 5] [--threads 2]
                                          [--cases 64,100,512,512 1,100,128,128]

Each case is N,T,D,H (batch_first, one layer, inference). Each round runs attnkit's
build/bench/lstm_bench (best of --reps forward calls after a warm-up, timed inside the process: no
JSON parsing or process start-up counted) and then PyTorch (torch.no_grad(), best of the same number
of calls after a warm-up), and records the ratio attnkit / PyTorch. Rounds alternate so that load
from other processes hits both alike; the summary is the median over rounds, with the range.
lstm_bench also times Eigen's bare GEMMs of the same shapes (input projection + T hidden products:
the GEMM bound) and a 1024^3 sgemm (the machine's peak with these threads), printed as GFLOP/s.
"""
import argparse
import os
import statistics

from bench_common import bench_binary, best_time, import_torch, run_json


def ours(binary, N, T, D, H, threads, reps):
    return run_json(binary, N=N, T=T, D=D, H=H, threads=threads, reps=reps)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build", default=os.path.join(here, "..", "build"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", nargs="+", default=["64,100,512,512", "1,100,128,128"])
    a = ap.parse_args()
    binary = bench_binary(a.build, "lstm_bench")
    torch = import_torch(a.threads)
    if torch is not None:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; attnkit {a.threads} threads; "
              f"nn.LSTM batch_first, 1 layer, float32, no_grad; {a.rounds} interleaved rounds, best of {a.reps} each")
    for case in a.cases:
        N, T, D, H = (int(v) for v in case.split(","))
        flops = 2.0 * N * T * (D + H) * 4 * H
        if torch is not None:
            torch.manual_seed(0)
            m = torch.nn.LSTM(D, H, batch_first=True)
            x = torch.randn(N, T, D)
        rows = []
        for r in range(a.rounds):
            mine = ours(binary, N, T, D, H, a.threads, a.reps)
            theirs = None
            if torch is not None:
                with torch.no_grad():
                    theirs = best_time(lambda: m(x), a.reps)
            rows.append((mine, theirs))
            ratio = f"  ratio {mine['best_s'] / theirs:.3f}" if theirs else ""
            print(f"N={N} T={T} D={D} H={H} round {r + 1}: attnkit {mine['best_s'] * 1e3:8.2f} ms "
                  f"({mine['gflops']:.0f} GFLOP/s; GEMMs alone {mine['gemm_bound_s'] * 1e3:.2f} ms, "
                  f"sgemm peak {mine['sgemm_peak_gflops']:.0f} GFLOP/s)   torch "
                  f"{theirs * 1e3 if theirs else float('nan'):8.2f} ms{ratio}", flush=True)
        med = statistics.median(x[0]["best_s"] for x in rows)
        line = (f"N={N} T={T} D={D} H={H} median: attnkit {med * 1e3:.2f} ms ({flops / med / 1e9:.0f} GFLOP/s, "
                f"GEMM bound {statistics.median(x[0]['gemm_bound_s'] for x in rows) * 1e3:.2f} ms, "
                f"sgemm peak {statistics.median(x[0]['sgemm_peak_gflops'] for x in rows):.0f} GFLOP/s)")
        if torch is not None:
            ratios = [x[0]["best_s"] / x[1] for x in rows]
            line += (f", torch {statistics.median(x[1] for x in rows) * 1e3:.2f} ms; ratio attnkit/torch "
                     f"{statistics.median(ratios):.3f} (range {min(ratios):.3f} .. {max(ratios):.3f})")
        print(line, flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""LSTM training step (forward + backward): attnkit vs PyTorch nn.LSTM, interleaved, float32.

  /usr/bin/python3 bench/lstm_backward_vs_torch.py [--build build] [--rounds 5] [--reps 3] [--threads 2]
                                                   [--cases 64,100,512,512]

Each case is N,T,D,H (batch_first, one layer). PyTorch: x.requires_grad_(); out, _ = m(x);
loss = out.sum(); loss.backward() (the gradients of x and of every weight). attnkit:
build/bench/lstm_bench --backward 1: Recurrent::forward keeping the cache, then Recurrent::backward
for d out.sum() / d out = 1, with d x and every weight gradient (timed inside the process: no JSON
parsing or process start-up counted). Each round runs both (best of --reps after a warm-up) and
records the ratio attnkit / PyTorch; the summary is the median over rounds, with the range.
GFLOP/s counts 3x the forward's GEMM flops (backward: d x and d W_ih, d h and d W_hh), against the
machine's sgemm peak with the same threads (a 1024^3 product, from lstm_bench).
"""
import argparse
import os
import statistics

from bench_common import bench_binary, best_time, import_torch, run_json, target_needs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build", default=os.path.join(here, "..", "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cases", nargs="+", default=["64,100,512,512"])
    a = ap.parse_args()
    binary = bench_binary(a.build, "lstm_bench")
    torch = import_torch(a.threads)
    if torch is not None:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; attnkit {a.threads} threads; "
              f"nn.LSTM batch_first, 1 layer, float32, out.sum().backward() with x.requires_grad; "
              f"{a.rounds} interleaved rounds, best of {a.reps} each")
    for case in a.cases:
        N, T, D, H = (int(v) for v in case.split(","))
        flops = 3 * 2.0 * N * T * (D + H) * 4 * H
        if torch is not None:
            torch.manual_seed(0)
            m = torch.nn.LSTM(D, H, batch_first=True)
            x = torch.randn(N, T, D, requires_grad=True)

            def step():
                m.zero_grad()
                x.grad = None
                out, _ = m(x)
                out.sum().backward()
        rows = []
        for r in range(a.rounds):
            mine = run_json(binary, N=N, T=T, D=D, H=H, threads=a.threads, reps=a.reps, backward=1)
            theirs = None
            if torch is not None:
                theirs = best_time(step, a.reps)
            rows.append((mine, theirs))
            ratio = f"  ratio {mine['best_s'] / theirs:.3f}" if theirs else ""
            print(f"N={N} T={T} D={D} H={H} round {r + 1}: attnkit fwd+bwd {mine['best_s'] * 1e3:8.1f} ms "
                  f"({mine['gflops']:.0f} GFLOP/s, sgemm peak {mine['sgemm_peak_gflops']:.0f} GFLOP/s)   torch "
                  f"{theirs * 1e3 if theirs else float('nan'):8.1f} ms{ratio}", flush=True)
        med = statistics.median(x[0]["best_s"] for x in rows)
        peak = statistics.median(x[0]["sgemm_peak_gflops"] for x in rows)
        line = (f"N={N} T={T} D={D} H={H} median: attnkit fwd+bwd {med * 1e3:.1f} ms ({flops / med / 1e9:.0f} GFLOP/s, "
                f"{100 * flops / med / 1e9 / peak:.0f}% of the sgemm peak {peak:.0f} GFLOP/s)")
        if torch is not None:
            ratios = [x[0]["best_s"] / x[1] for x in rows]
            line += (f", torch {statistics.median(x[1] for x in rows) * 1e3:.1f} ms; ratio attnkit/torch "
                     f"{statistics.median(ratios):.3f} (range {min(ratios):.3f} .. {max(ratios):.3f}; target <= 0.3)")
            line += "; " + target_needs(0.3, flops / 1e9, [x[1] for x in rows],
                                        [x[0]["sgemm_peak_gflops"] for x in rows])
        print(line, flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Self-attention: attnkit vs PyTorch nn.MultiheadAttention, interleaved, same sizes and threads.

  /usr/bin/python3 bench/attention_vs_torch.py [--build build] [--rounds 5] [--T 1024 4096] [--threads 2]

E=512, NH=8, N=1, float32, need_weights=False (PyTorch: eval(), no_grad, batch_first=True,
torch.set_num_threads(threads)). Each round runs attnkit's build/bench/attention_bench (best of
--reps calls, timed inside the process, so no JSON parsing or process start-up is counted) and then
PyTorch (best of the same number of calls, after one warm-up call), and records the ratio
attnkit / PyTorch. Rounds alternate so that load from other processes hits both alike; the
summary is the median over rounds. --long T also runs attnkit alone at T (e.g. 32768) and reports
its time and peak resident memory (getrusage ru_maxrss, i.e. what /usr/bin/time -v shows).
"""
import argparse
import os
import statistics

from bench_common import bench_binary, best_time, import_torch, run_json


def ours(binary, T, E, NH, threads, reps):
    return run_json(binary, T=T, E=E, heads=NH, threads=threads, reps=reps)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build", default=os.path.join(here, "..", "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--T", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--E", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--long", type=int, default=0, help="also run attnkit alone at this T (memory figure)")
    a = ap.parse_args()
    binary = bench_binary(a.build, "attention_bench")
    torch = import_torch(a.threads)
    if torch is not None:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; attnkit {a.threads} threads; "
              f"E={a.E} NH={a.heads} N=1 float32 need_weights=False; {a.rounds} interleaved rounds, best of {a.reps} each")
    for T in a.T:
        rows = []
        if torch is not None:
            torch.manual_seed(0)
            m = torch.nn.MultiheadAttention(a.E, a.heads, batch_first=True).eval()
            x = torch.randn(1, T, a.E)
        for r in range(a.rounds):
            mine = ours(binary, T, a.E, a.heads, a.threads, a.reps)["best_s"]
            theirs = None
            if torch is not None:
                with torch.no_grad():
                    theirs = best_time(lambda: m(x, x, x, need_weights=False), a.reps)
            rows.append((mine, theirs))
            ratio = f"  ratio {mine / theirs:.3f}" if theirs else ""
            print(f"T={T:5d} round {r + 1}: attnkit {mine * 1e3:9.1f} ms   torch "
                  f"{theirs * 1e3 if theirs else float('nan'):9.1f} ms{ratio}", flush=True)
        med_mine = statistics.median(x[0] for x in rows)
        if torch is not None:
            med_theirs = statistics.median(x[1] for x in rows)
            med_ratio = statistics.median(x[0] / x[1] for x in rows)
            print(f"T={T:5d} median: attnkit {med_mine * 1e3:.1f} ms, torch {med_theirs * 1e3:.1f} ms, "
                  f"ratio attnkit/torch {med_ratio:.3f} (range {min(x[0] / x[1] for x in rows):.3f} .. "
                  f"{max(x[0] / x[1] for x in rows):.3f})", flush=True)
        else:
            print(f"T={T:5d} median: attnkit {med_mine * 1e3:.1f} ms")
    if a.long:
        r = ours(binary, a.long, a.E, a.heads, a.threads, 1)
        print(f"T={a.long} attnkit alone: {r['best_s']:.1f} s, peak RSS {r['peak_rss_mb']:.0f} MB")


if __name__ == "__main__":
    main()

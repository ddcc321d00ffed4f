#!/usr/bin/python3
"""Multi-head self-attention forward + backward: attnkit vs PyTorch, interleaved, same sizes and threads.

  /usr/bin/python3 bench/attention_train_vs_torch.py [--build build] [--rounds 5] [--T 1024 4096] [--threads 2]
      [--long 32768]

E=512, NH=8, N=1, float32, need_weights=False. PyTorch 1.13: nn.MultiheadAttention(batch_first=True)
in train mode (dropout 0), input requiring grad, `out, _ = m(x, x, x, need_weights=False);
out.sum().backward()`. attnkit: build/bench/attention_bench --backward (forward keeping the cache,
then nn::multihead_attention_backward with dY = 1: gradients of the input and every weight).
Each round runs attnkit (best of --reps, timed inside the process) then PyTorch (best of --reps after
a warm-up) and records the ratio attnkit / PyTorch; the summary is the median over rounds.

GFLOP/s count the useful work of forward + backward without recomputation: projections
3 x 8 T E^2 (forward 8 T E^2: Q, K, V and output; backward twice that), attention 3 x 4 T^2 E
(forward QK^T and PV; backward dV, dP, dQ, dK). They are compared with the sgemm measured right after
each round's pair (attention_bench --sgemm-peak: ops::gemm, 1024^3, same threads).
--long T runs attnkit alone at T under /usr/bin/time -v and reports its time and peak memory.
"""
import argparse
import json
import os
import re
import statistics
import subprocess

from bench_common import bench_binary, best_time, import_torch, target_needs


def ours(binary, T, E, NH, threads, reps, *flags):
    args = [binary, "--T", str(T), "--E", str(E), "--heads", str(NH), "--threads", str(threads), "--reps", str(reps),
            *flags]
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def flops(T, E):
    return 3 * (8 * T * E * E + 4 * T * T * E)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build", default=os.path.join(here, "..", "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--T", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--E", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--long", type=int, default=0, help="also run attnkit alone at this T (peak memory)")
    a = ap.parse_args()
    binary = bench_binary(a.build, "attention_bench")
    def sgemm_peak():  # measured again in every round: a VM's speed drifts within minutes
        return ours(binary, 0, a.E, a.heads, a.threads, 3, "--sgemm-peak")["gflops"]

    print(f"sgemm peak (ops::gemm 1024^3, {a.threads} threads): {sgemm_peak():.1f} GFLOP/s now, again in every round",
          flush=True)
    torch = import_torch(a.threads)
    if torch is not None:
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; attnkit {a.threads} threads; "
              f"E={a.E} NH={a.heads} N=1 float32; forward + backward of out.sum(); {a.rounds} interleaved rounds, "
              f"best of {a.reps} each", flush=True)
    for T in a.T:
        rows = []
        if torch is not None:
            torch.manual_seed(0)
            m = torch.nn.MultiheadAttention(a.E, a.heads, batch_first=True).train()
            x = torch.randn(1, T, a.E, requires_grad=True)

            def step():
                out, _ = m(x, x, x, need_weights=False)
                out.sum().backward()
                m.zero_grad(set_to_none=True)
                x.grad = None
        for r in range(a.rounds):
            mine = ours(binary, T, a.E, a.heads, a.threads, a.reps, "--backward")["best_s"]
            theirs = None
            if torch is not None:
                theirs = best_time(step, a.reps)
            peak = sgemm_peak()
            rows.append((mine, theirs, peak))
            ratio = f"  ratio {mine / theirs:.3f}" if theirs else ""
            print(f"T={T:5d} round {r + 1}: attnkit {mine * 1e3:9.1f} ms ({flops(T, a.E) / mine / 1e9:5.1f} GFLOP/s, "
                  f"sgemm {peak:.1f})   torch {theirs * 1e3 if theirs else float('nan'):9.1f} ms{ratio}", flush=True)
        med = statistics.median(x[0] for x in rows)
        gf = flops(T, a.E) / med / 1e9
        share = statistics.median(flops(T, a.E) / x[0] / 1e9 / x[2] for x in rows)
        line = (f"T={T:5d} median: attnkit {med * 1e3:.1f} ms = {gf:.1f} GFLOP/s ({share:.0%} of the round's sgemm, "
                f"median {statistics.median(x[2] for x in rows):.1f} GFLOP/s)")
        if torch is not None:
            med_t = statistics.median(x[1] for x in rows)
            ratios = [x[0] / x[1] for x in rows]
            line += (f", torch {med_t * 1e3:.1f} ms = {flops(T, a.E) / med_t / 1e9:.1f} GFLOP/s; ratio attnkit/torch "
                     f"{statistics.median(ratios):.3f} (range {min(ratios):.3f} .. {max(ratios):.3f}; target <= 0.4)")
            line += "; " + target_needs(0.4, flops(T, a.E) / 1e9, [x[1] for x in rows], [x[2] for x in rows])
        print(line, flush=True)
    if a.long:
        p = subprocess.run(["/usr/bin/time", "-v", binary, "--T", str(a.long), "--E", str(a.E), "--heads", str(a.heads),
                            "--threads", str(a.threads), "--reps", "1", "--backward"],
                           check=True, capture_output=True, text=True)
        r = json.loads(p.stdout)
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
        print(f"T={a.long} attnkit forward+backward alone: {r['best_s']:.1f} s, peak RSS "
              f"{int(rss.group(1)) / 1024 if rss else r['peak_rss_mb']:.0f} MB (/usr/bin/time -v; target < 2048 MB)")


if __name__ == "__main__":
    main()

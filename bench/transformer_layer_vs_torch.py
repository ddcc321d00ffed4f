#!/usr/bin/python3
"""One Transformer encoder layer forward (inference): attnkit (build/bench/transformer_layer_bench) vs PyTorch 1.13
nn.TransformerEncoderLayer, interleaved, same sizes and threads.

  /usr/bin/python3 bench/transformer_layer_vs_torch.py [--build build] [--rounds 5] [--reps 5] [--threads 2]
      [--batch 16] [--len 256] [--d 512] [--ff 2048] [--heads 8] [--norm-first]

Both sides: post-LN (or pre-LN), ReLU, batch_first, no mask, no dropout; attnkit under NoGrad; PyTorch in eval()
under torch.inference_mode() (its fused "fast path", torch._transformer_encoder_layer_fwd). Each round runs
attnkit (best of --reps calls after a warm-up) and then PyTorch (likewise); the summary is the median ratio
attnkit / PyTorch (< 1: attnkit faster; the target is <= 0.7), and attnkit's GFLOP/s against the library's sgemm
at the layer's FFN shape [N*T, E] x [E, F] measured in the same process.
"""
import argparse
import json
import os
import statistics
import subprocess

from bench_common import bench_binary, best_time, import_torch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build", default=os.path.join(here, "..", "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--len", type=int, default=256)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--ff", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--norm-first", action="store_true")
    a = ap.parse_args()
    binary = bench_binary(a.build, "transformer_layer_bench")
    torch = import_torch(a.threads)
    layer = x = None
    if torch is not None:
        torch.manual_seed(0)
        layer = torch.nn.TransformerEncoderLayer(a.d, a.heads, a.ff, dropout=0.0, batch_first=True,
                                                 norm_first=a.norm_first).eval()
        x = torch.randn(a.batch, a.len, a.d)
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; attnkit {a.threads} threads; "
              f"{a.rounds} interleaved rounds, best of {a.reps} each")

    def torch_once():
        with torch.inference_mode():
            layer(x)

    cmd = [binary, "--batch", a.batch, "--len", a.len, "--d", a.d, "--ff", a.ff, "--heads", a.heads,
           "--threads", a.threads, "--reps", a.reps] + (["--norm-first"] if a.norm_first else [])
    mine, theirs, ratios, gf, peak = [], [], [], [], []
    for _ in range(a.rounds):
        r = json.loads(subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True).stdout)
        mine.append(r["best_s"])
        gf.append(r["gflops"])
        peak.append(r["sgemm_gflops"])
        if torch is not None:
            p = best_time(torch_once, a.reps)
            theirs.append(p)
            ratios.append(r["best_s"] / p)
        print(f"round {len(mine)}: attnkit {r['best_s'] * 1e3:.1f} ms ({r['gflops']:.0f} GFLOP/s, sgemm "
              f"{r['sgemm_gflops']:.0f})" + (f"  torch {theirs[-1] * 1e3:.1f} ms  ratio {ratios[-1]:.2f}" if ratios else ""))
    line = (f"encoder layer [{a.batch}, {a.len}, {a.d}] ff {a.ff} heads {a.heads}{' pre-LN' if a.norm_first else ''}: "
            f"attnkit {statistics.median(mine) * 1e3:.1f} ms ({statistics.median(gf):.0f} GFLOP/s, "
            f"{100 * statistics.median(gf) / statistics.median(peak):.0f}% of sgemm {statistics.median(peak):.0f} GFLOP/s)")
    if ratios:
        line += (f"  torch {statistics.median(theirs) * 1e3:.1f} ms  ratio {statistics.median(ratios):.2f} "
                 f"(range {min(ratios):.2f} .. {max(ratios):.2f})")
    print(line)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Two builds of attnkit side by side: B's time over A's for the library's main workloads, in paired,
interleaved rounds (A then B, B then A, alternating), so a change that should not move the speed (a move
of code between files, a refactor) is shown to be level, and one that should is measured.

  python3 bench/ab_builds.py --a BUILD_A --b BUILD_B [--rounds 8] [--reps 5] [--threads 2]
                             [--only lstm64,lstm64_backward,lstm1,gru64,attn1024,attn1024_train,encoder]

Each workload runs one of the in-process benchmark binaries of BUILD/bench (best of --reps calls after a
warm-up, as that binary reports it, "best_s"). Printed per workload: each round's ratio B / A and the
median with its range. A ratio below 1 means B is faster. Both builds run with their own library
(LD_LIBRARY_PATH=BUILD/lib). Benchmark only: no test needs it; python3 alone, no PyTorch.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

WORKLOADS = {
    "lstm64": ("lstm_bench", ["--N", "64", "--T", "100", "--D", "512", "--H", "512", "--gemms", "0"]),
    "lstm64_backward": ("lstm_bench", ["--N", "64", "--T", "100", "--D", "512", "--H", "512", "--gemms", "0",
                                       "--backward", "1"]),
    "lstm1": ("lstm_bench", ["--N", "1", "--T", "100", "--D", "128", "--H", "128", "--gemms", "0"]),
    "gru64": ("lstm_bench", ["--N", "64", "--T", "100", "--D", "512", "--H", "512", "--gemms", "0", "--cell", "gru"]),
    "attn1024": ("attention_bench", ["--T", "1024"]),
    "attn1024_train": ("attention_bench", ["--T", "1024", "--backward"]),
    "encoder": ("transformer_layer_bench", ["--batch", "16", "--len", "256"]),
}


def run(build, name, args, reps, threads):
    binary = os.path.join(build, "bench", name)
    if not os.path.exists(binary):
        sys.exit(f"{binary} not found: build first (scripts/build.sh)")
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "lib"))
    out = subprocess.run([binary, *args, "--reps", str(reps), "--threads", str(threads)], check=True,
                         capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["best_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the build to compare against (its bench/ and lib/)")
    ap.add_argument("--b", required=True, help="the build measured")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default=",".join(WORKLOADS))
    o = ap.parse_args()
    names = o.only.split(",")
    for n in names:
        if n not in WORKLOADS:
            sys.exit(f"ab_builds: --only: unknown workload '{n}' (known: {', '.join(WORKLOADS)})")
    print(f"B = {o.b}, A = {o.a}; {o.rounds} rounds, best of {o.reps} calls, {o.threads} threads; "
          f"load average {os.getloadavg()[0]:.2f}")
    for n in names:
        binary, args = WORKLOADS[n]
        ratios = []
        for r in range(o.rounds):
            t = {}
            for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
                t[side] = run(getattr(o, side), binary, args, o.reps, o.threads)
            ratios.append(t["b"] / t["a"])
        print(f"{n:16s} B/A median {statistics.median(ratios):.3f}  range {min(ratios):.3f}-{max(ratios):.3f}  "
              f"rounds {' '.join(f'{x:.3f}' for x in ratios)}")


if __name__ == "__main__":
    main()

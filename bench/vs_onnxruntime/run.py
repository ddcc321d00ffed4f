#!/usr/bin/python3
"""attnkit vs ONNX Runtime (CPU, the npm package onnxruntime-node), same modules, shapes and threads.

  cd bench/vs_onnxruntime && npm install --ignore-scripts onnxruntime-node && cd ../..   # once
  /usr/bin/python3 bench/vs_onnxruntime/run.py [--build build] [--rounds 5] [--reps 5] [--threads 2]
                                               [--only lstm64,lstm1,gru64,attn1024,attn4096,encoder]

Needs Debian's python3-torch (run with /usr/bin/python3), node, and attnkit built (build/bench/lstm_bench,
build/bench/attention_bench, build/bench/transformer_layer_bench, build/bin/lstm-run, build/bin/attn-score). Benchmark only: no test needs it.

For each workload the PyTorch module (seeded) is exported with torch.onnx.export (opset 14, dynamic batch
and length) into BUILD/vs_onnxruntime/, with its state_dict as JSON and one input x.
1. Agreement: ONNX Runtime runs the .onnx on x; attnkit's tool (lstm-run --weights, attn-score --self
   --heads --weights) runs the same state_dict on the same x; both are compared with PyTorch's output
   (max |difference| against a tolerance); a disagreement is printed and makes the exit status 1.
2. Timing, in interleaved rounds (the order alternates every round): attnkit's in-process benchmark
   (build/bench/lstm_bench or attention_bench: best of --reps calls after a warm-up, same shapes and
   threads; its weights are its own random ones, which does not change the work) and ONNX Runtime (best
   of --reps session.run calls after a warm-up; a workload under 0.1 GFLOP, LSTM N=1, takes at least
   MIN_REPS_SHORT = 100 calls on both sides, intraOpNumThreads = --threads, interOpNumThreads 1,
   sequential, all graph optimizations). Printed: per round and the median ratio attnkit / ONNX Runtime
   with its range, beside the load average.
3. The machine's ceiling, measured in the same rounds (right after each pair of timings): the sgemm
   (attention_bench --sgemm-peak: ops::gemm 1024^3, same threads) and the arithmetic peak (attention_bench
   --fma-peak: independent FMAs in registers on every thread). Printed per workload: the GFLOP/s of
   attnkit and ONNX Runtime (the workload's multiply-adds: GEMMs and attention products, elementwise work
   not counted), the same as a share of the round's sgemm, and the rate the target ratio would need:
   above the sgemm, the target is beyond this machine (no sgemm reaches it: docs/benchmarks.md).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

# A call under a millisecond: best of at least this many calls a round on either side (with --reps 5 the best
# of a fresh process's first calls measured the start-up, not the steady state a latency user sees).
MIN_REPS_SHORT = 100

WORKLOADS = {
    # name: (kind, shape, target ratio attnkit / ONNX Runtime)
    "lstm64": ("lstm", dict(N=64, T=100, D=512, H=512), 0.85),
    "lstm1": ("lstm", dict(N=1, T=100, D=128, H=128), 0.5),
    "gru64": ("gru", dict(N=64, T=100, D=512, H=512), 0.85),
    "attn1024": ("attn", dict(T=1024, E=512, heads=8), 0.8),
    "attn4096": ("attn", dict(T=4096, E=512, heads=8), 0.8),
    "encoder": ("encoder", dict(N=16, T=256, E=512, ff=2048, heads=8), 0.9),
}


def flops(kind, s):
    """The workload's GEMM FLOPs (2 per multiply-add): projections, recurrent products, attention products."""
    if kind in ("lstm", "gru"):
        G = 4 if kind == "lstm" else 3
        return 2 * s["N"] * s["T"] * (s["D"] + s["H"]) * G * s["H"]
    if kind == "attn":  # Q, K, V and output projections; Q K^T and P V
        return 8 * s["T"] * s["E"] ** 2 + 4 * s["T"] ** 2 * s["E"]
    rows = s["N"] * s["T"]  # encoder: projections, FFN, attention products per sequence
    return rows * (8 * s["E"] ** 2 + 4 * s["E"] * s["ff"]) + 4 * s["N"] * s["T"] ** 2 * s["E"]


def describe(kind, s):
    if kind == "encoder":
        return f"Transformer encoder layer N={s['N']} T={s['T']} d={s['E']} ff={s['ff']} {s['heads']} heads"
    if kind == "attn":
        return f"self-attention E={s['E']} {s['heads']} heads T={s['T']}"
    return f"{kind.upper()} N={s['N']} T={s['T']} D={s['D']} H={s['H']}"


class Ort:
    """The node process running ort_runner.js."""

    def __init__(self, here):
        node = shutil.which("node")
        if not node:
            sys.exit("node not found (Debian: apt-get install nodejs)")
        if not os.path.isdir(os.path.join(here, "node_modules", "onnxruntime-node")):
            sys.exit(f"onnxruntime-node missing: cd {here} && npm install --ignore-scripts onnxruntime-node")
        self.p = subprocess.Popen([node, os.path.join(here, "ort_runner.js")], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, cwd=here)

    def __call__(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        answer = json.loads(self.p.stdout.readline())
        if not answer.get("ok"):
            sys.exit(f"onnxruntime: {answer.get('error')}")
        return answer


def export(torch, kind, s, work, name):
    """Exports the module; writes NAME.onnx, NAME.weights.json, NAME.x.json, NAME.x.f32; returns (x, torch output)."""
    torch.manual_seed(0)
    if kind == "attn":
        mha = torch.nn.MultiheadAttention(s["E"], s["heads"], batch_first=True).eval()

        class SelfAttention(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(x, x, x, need_weights=False)[0]

        module, state = SelfAttention(mha).eval(), mha.state_dict()
        x = torch.randn(1, s["T"], s["E"])
        names, axes = ["output"], {"x": {1: "T"}}
    elif kind == "encoder":  # post-LN, ReLU, no dropout: the paper's layer
        module = torch.nn.TransformerEncoderLayer(s["E"], s["heads"], s["ff"], dropout=0.0, batch_first=True).eval()
        state = module.state_dict()
        x = torch.randn(s["N"], s["T"], s["E"])
        names, axes = ["output"], {"x": {0: "N", 1: "T"}}
    else:
        cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
        module = cls(s["D"], s["H"], batch_first=True).eval()
        state = module.state_dict()
        x = torch.randn(s["N"], s["T"], s["D"])
        names = ["output", "h_n", "c_n"] if kind == "lstm" else ["output", "h_n"]
        axes = {"x": {0: "N", 1: "T"}}
    with torch.no_grad():
        ref = module(x)
        ref = ref[0] if isinstance(ref, tuple) else ref
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), os.path.join(work, name + ".onnx"), input_names=["x"], output_names=names,
                          dynamic_axes=axes, opset_version=14)
    with open(os.path.join(work, name + ".weights.json"), "w") as f:
        json.dump({k: {"shape": list(v.shape), "data": v.flatten().tolist()} for k, v in state.items()}, f)
    with open(os.path.join(work, name + ".x.json"), "w") as f:
        json.dump({"shape": list(x.shape), "data": x.flatten().tolist()}, f)
    x.numpy().astype("float32").tofile(os.path.join(work, name + ".x.f32"))
    return x, ref


def attnkit_output(build, kind, s, work, name, threads):
    """The attnkit tool's output [.., ..] on the exported weights and x, as a flat list of floats."""
    w, x = os.path.join(work, name + ".weights.json"), os.path.join(work, name + ".x.json")
    if kind == "encoder":  # no tool runs one layer: the bench binary loads the state_dict and writes the output
        y = os.path.join(work, name + ".attnkit.json")
        subprocess.run(bench_args(build, kind, s, threads, 1) + ["--weights", w, "--input", x, "--output", y], check=True)
        with open(y) as f:
            import numpy as np
            return np.asarray(json.load(f), dtype=np.float32).reshape(-1)
    if kind == "attn":
        args = [os.path.join(build, "bin", "attn-score"), "--self", x, "--heads", str(s["heads"]), "--weights", w]
    else:
        args = [os.path.join(build, "bin", "lstm-run"), x, "--weights", w, "--cell", kind]
    out = subprocess.run(args + ["--threads", str(threads), "--format", "flat"], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out)["output"]["data"]


def bench_args(build, kind, s, threads, reps):
    if kind == "encoder":
        return [os.path.join(build, "bench", "transformer_layer_bench"), "--batch", str(s["N"]), "--len", str(s["T"]),
                "--d", str(s["E"]), "--ff", str(s["ff"]), "--heads", str(s["heads"]), "--threads", str(threads),
                "--reps", str(reps)]
    if kind == "attn":
        return [os.path.join(build, "bench", "attention_bench"), "--T", str(s["T"]), "--E", str(s["E"]), "--heads",
                str(s["heads"]), "--threads", str(threads), "--reps", str(reps)]
    return [os.path.join(build, "bench", "lstm_bench"), "--N", str(s["N"]), "--T", str(s["T"]), "--D", str(s["D"]),
            "--H", str(s["H"]), "--threads", str(threads), "--reps", str(reps), "--cell", kind]


def ceiling(build, threads):
    """(sgemm GFLOP/s, FMA peak GFLOP/s) measured now with the same threads."""
    def run(flag):
        out = subprocess.run([os.path.join(build, "bench", "attention_bench"), flag, "--threads", str(threads),
                              "--reps", "5"], check=True, capture_output=True, text=True).stdout
        return json.loads(out)

    return run("--sgemm-peak")["gflops"], run("--fma-peak")["fma_peak_gflops"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build", default=os.path.join(here, "..", "..", "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default=",".join(WORKLOADS))
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    for tool in ("bench/lstm_bench", "bench/attention_bench", "bench/transformer_layer_bench", "bin/lstm-run",
                 "bin/attn-score"):
        if not os.path.exists(os.path.join(build, tool)):
            sys.exit(f"{os.path.join(build, tool)} not found: build first (scripts/build.sh)")
    try:
        import torch
    except ImportError:
        sys.exit("PyTorch not importable: run with /usr/bin/python3 (Debian's python3-torch)")
    torch.set_num_threads(a.threads)
    work = os.path.join(build, "vs_onnxruntime")
    os.makedirs(work, exist_ok=True)
    ort = Ort(here)
    disagree = False
    print(f"torch {torch.__version__} (export only); threads {a.threads}; {a.rounds} interleaved rounds, "
          f"best of {a.reps} calls each; load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    for name in a.only.split(","):
        kind, s, target = WORKLOADS[name]
        reps = max(a.reps, MIN_REPS_SHORT) if flops(kind, s) < 1e8 else a.reps
        x, ref = export(torch, kind, s, work, name)
        version = ort(cmd="load", name=name, model=os.path.join(work, name + ".onnx"), threads=a.threads)["version"]
        ort(cmd="input", name=name, path=os.path.join(work, name + ".x.f32"), dims=list(x.shape))
        # 1. agreement on the same weights and input
        dims = ort(cmd="run", name=name, out=os.path.join(work, name + ".ort"))["outputs"]["output"]
        import numpy as np
        theirs = np.fromfile(os.path.join(work, name + ".ort.output.f32"), dtype=np.float32)
        r = ref.numpy().reshape(-1)
        if kind in ("lstm", "gru") and list(dims) != list(ref.shape):  # ONNX LSTM/GRU output: [T, dirs, N, H] -> [N, T, H]
            theirs = theirs.reshape(dims).transpose(2, 0, 1, 3).reshape(-1)
        mine = np.asarray(attnkit_output(build, kind, s, work, name, a.threads), dtype=np.float32)
        scale = float(np.abs(r).max())
        tol = 1e-4 * max(1.0, scale)
        d_ort, d_ours = float(np.abs(theirs - r).max()), float(np.abs(mine - r).max())
        ok = d_ort <= tol and d_ours <= tol
        disagree |= not ok
        print(f"{describe(kind, s)}: outputs {'agree' if ok else 'DISAGREE'}: max |ORT - torch| {d_ort:.2e}, "
              f"max |attnkit - torch| {d_ours:.2e} (tolerance {tol:.1e}); onnxruntime-node {version}; best of {reps} calls a round", flush=True)
        # 2. interleaved timing
        rows = []
        gf = flops(kind, s) / 1e9
        for rnd in range(a.rounds):
            def ours():
                out = subprocess.run(bench_args(build, kind, s, a.threads, reps), check=True, capture_output=True,
                                     text=True).stdout
                return json.loads(out)["best_s"]

            def theirs_t():
                return ort(cmd="time", name=name, reps=reps)["best_s"]

            if rnd % 2 == 0:
                m, t = ours(), theirs_t()
            else:
                t, m = theirs_t(), ours()
            sgemm, fma = ceiling(build, a.threads)
            rows.append((m, t, sgemm, fma))
            print(f"  round {rnd + 1}: attnkit {m * 1e3:9.3f} ms   onnxruntime {t * 1e3:9.3f} ms   ratio {m / t:.3f}   "
                  f"GFLOP/s: attnkit {gf / m:.1f}, ORT {gf / t:.1f}, sgemm {sgemm:.1f}, FMA peak {fma:.1f}", flush=True)
        ratios = [m / t for m, t, _, _ in rows]
        med = {k: statistics.median(r[i] for r in rows) for i, k in enumerate(("ours", "ort", "sgemm", "fma"))}
        print(f"{describe(kind, s)} median: attnkit {med['ours'] * 1e3:.3f} ms, "
              f"onnxruntime {med['ort'] * 1e3:.3f} ms, ratio attnkit/ORT "
              f"{statistics.median(ratios):.3f} (range {min(ratios):.3f} .. {max(ratios):.3f}); load average "
              f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
        # the target's rate against the round's sgemm, median over the rounds
        need = [gf / (target * t) / sg for _, t, sg, _ in rows]
        print(f"{describe(kind, s)} ceiling: {gf:.3f} GFLOP; attnkit {gf / med['ours']:.1f} GFLOP/s "
              f"({statistics.median(gf / m / sg for m, _, sg, _ in rows):.0%} of the round's sgemm), ORT "
              f"{gf / med['ort']:.1f} ({statistics.median(gf / t / sg for _, t, sg, _ in rows):.0%}); sgemm "
              f"{med['sgemm']:.1f} GFLOP/s = {med['sgemm'] / med['fma']:.0%} of the FMA peak {med['fma']:.1f}; "
              f"ratio {target} needs {statistics.median(need):.0%} of the round's sgemm (range {min(need):.0%} .. "
              f"{max(need):.0%})", flush=True)
    ort.p.stdin.close()
    ort.p.wait()
    sys.exit(1 if disagree else 0)


if __name__ == "__main__":
    main()

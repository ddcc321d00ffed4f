"""What the bench/*_vs_torch.py drivers share: the attnkit benchmark binary, run and parsed, and
PyTorch when it is importable (the drivers then print attnkit's times only)."""
import json
import os
import subprocess
import sys
import time


def bench_binary(build, name):
    """build/bench/NAME, or exit with a hint."""
    binary = os.path.join(build, "bench", name)
    if not os.path.exists(binary):
        sys.exit(f"{binary} not found: build first (scripts/build.sh)")
    return binary


def run_json(binary, **options):
    """Runs BINARY --key value ... and parses the one JSON line it prints."""
    args = [binary]
    for key, value in options.items():
        args += [f"--{key}", str(value)]
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def import_torch(threads):
    """torch with torch.set_num_threads(threads), or None when it is not importable."""
    try:
        import torch
    except ImportError:
        print("PyTorch not importable: attnkit times only", file=sys.stderr)
        return None
    torch.set_num_threads(threads)
    blas = os.environ.get("OPENBLAS_NUM_THREADS")
    # Debian's torch calls OpenBLAS (libopenblas0-pthread), whose own threads ignore set_num_threads: unset, it
    # starts one per core beside torch's OpenMP threads, which then spin against it on small products (a
    # seq2seq step runs about twice as long with it unset as with OPENBLAS_NUM_THREADS=1).
    print(f"PyTorch: {threads} OpenMP threads; OpenBLAS threads: "
          f"{blas if blas else 'unset (one per core)'} (set OPENBLAS_NUM_THREADS to change)", file=sys.stderr)
    # OpenBLAS 0.3.21 picks its kernel from the processor unless OPENBLAS_CORETYPE names one; on processors
    # newer than it knows (an Emerald Rapids Xeon) it falls back to a generic kernel, several times slower
    # than SkylakeX's: PyTorch's matmul rate, printed here, tells which ran.
    a = torch.randn(1024, 1024)
    a @ a
    start = time.perf_counter()
    a @ a
    rate = 2 * 1024 ** 3 / (time.perf_counter() - start) / 1e9
    print(f"PyTorch's BLAS: OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, "
          f"torch.mm 1024^3 {rate:.0f} GFLOP/s", file=sys.stderr)
    return torch


def seq2seq_train_step(torch, m, lr, src_vocab, tgt_vocab, N, S, T):
    """One Adam training step (clip 1) of a seq2seq module m(src, tgt_in, tgt_out) -> loss on a fixed random
    batch (ids from 4: no specials), as a callable: what the seq2seq benches time on the PyTorch side."""
    opt = torch.optim.Adam(m.parameters(), lr=lr)
    src = torch.randint(4, src_vocab, (N, S))
    tgt_in = torch.randint(4, tgt_vocab, (N, T))
    tgt_out = torch.randint(4, tgt_vocab, (N, T))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = m(src, tgt_in, tgt_out)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
    return step


def best_time(call, reps):
    """Best wall time in seconds of `reps` calls of call(), after one warm-up call."""
    import time
    call()  # warm-up
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best


def best_wall_and_cpu(call, reps):
    """Best wall time and best process CPU time (every thread) in seconds of `reps` calls, after one warm-up
    call. On a shared machine the CPU time of a one-thread run is the figure that holds."""
    import time
    call()  # warm-up
    wall = cpu = float("inf")
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        call()
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return wall, cpu


def target_needs(target, gflop, theirs_s, sgemm_gflops):
    """'ratio T needs X% of the round's sgemm (range ..)': the rate the target ratio asks of attnkit against
    each round's sgemm (gflop of work, the peer's seconds and the sgemm's GFLOP/s per round); above 100% the
    target is beyond the machine."""
    import statistics
    need = [gflop / (target * t) / sg for t, sg in zip(theirs_s, sgemm_gflops)]
    return (f"ratio {target} needs {statistics.median(need):.0%} of the round's sgemm (range {min(need):.0%} .. "
            f"{max(need):.0%})")

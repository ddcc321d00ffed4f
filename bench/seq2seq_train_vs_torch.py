#!/usr/bin/python3
"""One training step of a recurrent encoder-decoder: attnkit vs PyTorch, interleaved, same sizes and threads.

  /usr/bin/python3 bench/seq2seq_train_vs_torch.py [--build build] [--rounds 5] [--reps 10] [--threads 2]
      [--N 64] [--S 20] [--T 20] [--H 256] [--E 256] [--V 1000] [--attention dot] [--profile]

The model (seq2seq-train's speed target): embeddings (V, E) for source and target, a one-layer LSTM encoder and
decoder (hidden H), Luong dot attention (scores s_t . enc_s, softmax over the source, context), combine
tanh(Linear(2H -> H)([s; c])), output Linear(H -> V), cross-entropy over N x T tokens (ignore_index 0: no
token is padding here), gradient clipping to norm 1, one Adam step (lr 1e-3). Source S tokens, decoder T
steps. attnkit: build/bench/seq2seq_step_bench (models::Seq2Seq, train::Adam; clip included, timed inside
the process); PyTorch 1.13 the same in nn modules. Each round runs attnkit (best of --reps after a warm-up)
then PyTorch (best of --reps after a warm-up) and records the ratio attnkit / PyTorch; the summary is the
median over rounds. Each round also gives both steps' best process CPU time and their ratio ("CPU"): with
--threads 1 on a shared machine that is the ratio that holds. --profile also prints attnkit's median time per
phase.
"""
import argparse
import os
import statistics

from bench_common import bench_binary, best_wall_and_cpu, import_torch, run_json, seq2seq_train_step


def torch_step(torch, a):
    nn = torch.nn
    torch.manual_seed(0)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_embed = nn.Embedding(a.V, a.E, padding_idx=0)
            self.encoder = nn.LSTM(a.E, a.H, batch_first=True)
            self.tgt_embed = nn.Embedding(a.V, a.E, padding_idx=0)
            self.decoder = nn.LSTM(a.E, a.H, batch_first=True)
            self.combine = nn.Linear(2 * a.H, a.H)
            self.output = nn.Linear(a.H, a.V)

        def forward(self, src, tgt_in, tgt_out):
            enc, (h, c) = self.encoder(self.src_embed(src))             # [N, S, H]
            s, _ = self.decoder(self.tgt_embed(tgt_in), (h, c))          # [N, T, H]
            w = torch.softmax(torch.bmm(s, enc.transpose(1, 2)), -1)     # [N, T, S]
            ctx = torch.bmm(w, enc)                                      # [N, T, H]
            h_t = torch.tanh(self.combine(torch.cat([s, ctx], -1)))      # [N, T, H]
            logits = self.output(h_t)                                    # [N, T, V]
            return nn.functional.cross_entropy(logits.reshape(-1, a.V), tgt_out.reshape(-1), ignore_index=0)

    m = Model().train()
    return seq2seq_train_step(torch, m, 1e-3, a.V, a.V, a.N, a.S, a.T)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build", default=os.path.join(here, "..", "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    for k, v in (("N", 64), ("S", 20), ("T", 20), ("H", 256), ("E", 256), ("V", 1000)):
        ap.add_argument(f"--{k}", type=int, default=v)
    ap.add_argument("--attention", default="dot")
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    binary = bench_binary(a.build, "seq2seq_step_bench")
    torch = import_torch(a.threads)
    step = torch_step(torch, a) if torch is not None else None
    if a.attention != "dot" and torch is not None:
        print("note: the PyTorch model uses dot attention whatever --attention says")
    print(f"N={a.N} S={a.S} T={a.T} E={a.E} H={a.H} V={a.V} lstm, {a.attention} attention, {a.threads} threads; "
          f"{a.rounds} interleaved rounds, best of {a.reps}; load average {os.getloadavg()[0]:.1f}" +
          (f"; torch {torch.__version__}, {torch.get_num_threads()} threads" if torch else ""), flush=True)
    ratios, cpu_ratios = [], []
    for r in range(a.rounds):
        mine = run_json(binary, N=a.N, S=a.S, T=a.T, H=a.H, E=a.E, V=a.V, attention=a.attention,
                        threads=a.threads, reps=a.reps, profile=1 if a.profile else 0)
        theirs, theirs_cpu = best_wall_and_cpu(step, a.reps) if step else (None, None)
        extra = ""
        if a.profile:
            extra = "  (median: forward {:.1f}, backward {:.1f}, clip {:.1f}, adam {:.1f} ms)".format(
                *(mine[k] * 1e3 for k in ("forward_s", "backward_s", "clip_s", "adam_s")))
        line = f"round {r + 1}: attnkit {mine['best_s'] * 1e3:8.1f} ms"
        if theirs:
            ratios.append(mine["best_s"] / theirs)
            cpu_ratios.append(mine["best_cpu_s"] / theirs_cpu)
            line += (f"   torch {theirs * 1e3:8.1f} ms   ratio {ratios[-1]:.3f}   (CPU: attnkit "
                     f"{mine['best_cpu_s'] * 1e3:.1f} ms, torch {theirs_cpu * 1e3:.1f} ms, ratio {cpu_ratios[-1]:.3f})")
        print(line + extra, flush=True)
    if ratios:
        print(f"median ratio attnkit / torch: {statistics.median(ratios):.3f}  (target <= 0.25); "
              f"CPU time: {statistics.median(cpu_ratios):.3f}")


if __name__ == "__main__":
    main()

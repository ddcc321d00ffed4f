#!/usr/bin/python3
"""G2P training speed, attnkit vs PyTorch: one training step of bench/g2p.sh's model, tokens per second.

  /usr/bin/python3 bench/g2p_vs_torch.py [--build build] [--rounds 5] [--reps 20] [--threads 2]
      [--N 64] [--S 8] [--T 8] [--H 128] [--E 64] [--Vs 30] [--Vt 45] [--dropout 0.1]
  /usr/bin/python3 bench/g2p_vs_torch.py --train-run train.tsv test.tsv [--steps 12000] [--H 128] [--E 64]
      [--N 64] [--dropout 0.1] [--label-smoothing 0] [--lr 0.003] [--warmup 200] [--threads 2]

The second form trains the same module on the G2P data with bench/g2p.sh's recipe and scores the test words as
seq2seq-eval does: the WER of PyTorch's run of the recipe at the wall time it took.

The model is the one bench/g2p.sh trains (seq2seq-train --model lstm --attention additive --bidirectional
--hidden 128 --embed 64 --dropout 0.1 --batch 64 --clip 1, the default --attention-style luong), with the
equations of docs/seq2seq-train.md "The model" (Legend: N batch, S source length, T decoder steps, E embedding,
H hidden per direction, Hd = 2H, Vs / Vt source / target vocabularies):

  x   = drop(src_embed[src])                       [N, S, E]
  enc, (h_n, c_n) = bidirectional LSTM(x)          [N, S, Hd]; s_0 = ([h_fwd; h_bwd], [c_fwd; c_bwd])  [1, N, Hd]
  s   = LSTM_Hd(drop(tgt_embed[tgt_in]), s_0)      [N, T, Hd]   (Luong: teacher forcing, one call over all T)
  e   = v . tanh(s W_q + enc W_k)                  [N, T, S]    (W_q, W_k [Hd, Hd], v [Hd], no bias)
  c   = softmax_S(e) enc                           [N, T, Hd]
  h~  = tanh(combine([s; c]))                      [N, T, Hd]   (Linear(2 Hd -> Hd))
  loss = cross_entropy(output(drop(h~)), tgt_out, ignore_index 0)   (Linear(Hd -> Vt))

then the gradient, clipping to norm 1 and one Adam step. Sizes: a G2P batch (CMU dictionary words as
characters, about 30 source symbols with the four specials; phonemes, about 45 target symbols): 64 words of 8
letters, 7 phonemes + <eos> (every row the same length here, so no padding and no packing in either library;
the real data's mean lengths are about 7.5 letters and 6.5 phonemes). attnkit: build/bench/seq2seq_step_bench
(models::Seq2Seq, the step seq2seq-train runs); PyTorch 1.13: the module below. Each round runs attnkit (best of
--reps after a warm-up) then PyTorch (the same) and prints both steps' wall time and process CPU time, and the
training tokens per second (target tokens N * T per step, as seq2seq-train's tokens_per_s counts them) of each;
the summary is the median over rounds. With --threads 1 on a loaded machine the CPU-time figures are the ones
that hold (a step's CPU time is its wall time on a quiet core).
"""
import argparse
import os
import statistics

from bench_common import bench_binary, best_wall_and_cpu, import_torch, run_json, seq2seq_train_step


def make_model(torch, a):
    """The PyTorch module of the equations above; forward() also takes source and target lengths (padded rows:
    the encoder runs each row to its length, padded keys are masked, as attnkit does)."""
    nn = torch.nn
    Hd = 2 * a.H

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_embed = nn.Embedding(a.Vs, a.E, padding_idx=0)
            self.encoder = nn.LSTM(a.E, a.H, batch_first=True, bidirectional=True)
            self.tgt_embed = nn.Embedding(a.Vt, a.E, padding_idx=0)
            self.decoder = nn.LSTM(a.E, Hd, batch_first=True)
            bound = Hd ** -0.5
            self.W_q = nn.Parameter(torch.empty(Hd, Hd).uniform_(-bound, bound))  # [Hd, A = Hd]
            self.W_k = nn.Parameter(torch.empty(Hd, Hd).uniform_(-bound, bound))  # [Hd, A]
            self.v = nn.Parameter(torch.empty(Hd).uniform_(-bound, bound))        # [A]
            self.combine = nn.Linear(2 * Hd, Hd)
            self.output = nn.Linear(Hd, a.Vt)
            self.drop = nn.Dropout(a.dropout)

        def forward(self, src, tgt_in, tgt_out, src_lengths=None):
            x = self.drop(self.src_embed(src))                                        # [N, S, E]
            if src_lengths is None:
                enc, (h, c) = self.encoder(x)                                         # [N, S, Hd], [2, N, H]
            else:
                packed = nn.utils.rnn.pack_padded_sequence(x, src_lengths, batch_first=True, enforce_sorted=False)
                enc, (h, c) = self.encoder(packed)
                enc, _ = nn.utils.rnn.pad_packed_sequence(enc, batch_first=True, total_length=src.shape[1])
            s0 = (torch.cat([h[0], h[1]], -1).unsqueeze(0), torch.cat([c[0], c[1]], -1).unsqueeze(0))  # [1, N, Hd]
            s, _ = self.decoder(self.drop(self.tgt_embed(tgt_in)), s0)                # [N, T, Hd]
            z = torch.tanh((s @ self.W_q).unsqueeze(2) + (enc @ self.W_k).unsqueeze(1))  # [N, T, S, A]
            e = z @ self.v                                                            # [N, T, S]
            if src_lengths is not None:
                pad = torch.arange(src.shape[1])[None, :] >= src_lengths[:, None]     # [N, S]
                e = e.masked_fill(pad[:, None, :], float("-inf"))
            w = torch.softmax(e, -1)                                                  # [N, T, S]
            ctx = torch.bmm(w, enc)                                                   # [N, T, Hd]
            h_t = torch.tanh(self.combine(torch.cat([s, ctx], -1)))                   # [N, T, Hd]
            logits = self.output(self.drop(h_t))                                      # [N, T, Vt]
            return nn.functional.cross_entropy(logits.reshape(-1, a.Vt), tgt_out.reshape(-1), ignore_index=0,
                                               label_smoothing=getattr(a, "label_smoothing", 0.0))

        def encode(self, src, src_lengths):
            """The encoder of forward(): enc [N, S, Hd], enc W_k [N, S, A], the padding mask [N, S], s_0."""
            x = self.src_embed(src)
            packed = nn.utils.rnn.pack_padded_sequence(x, src_lengths, batch_first=True, enforce_sorted=False)
            enc, (h, c) = self.encoder(packed)
            enc, _ = nn.utils.rnn.pad_packed_sequence(enc, batch_first=True, total_length=src.shape[1])
            pad = torch.arange(src.shape[1])[None, :] >= src_lengths[:, None]
            s0 = (torch.cat([h[0], h[1]], -1).unsqueeze(0), torch.cat([c[0], c[1]], -1).unsqueeze(0))
            return enc, enc @ self.W_k, pad, s0

        def step(self, y, state, enc, keys, pad):
            """One decoder step of forward() for the previous tokens y [N]: logits [N, Vt] and the new state."""
            s, state = self.decoder(self.tgt_embed(y)[:, None, :], state)             # [N, 1, Hd]
            e = torch.tanh((s @ self.W_q) + keys) @ self.v                            # [N, S]
            w = torch.softmax(e.masked_fill(pad, float("-inf")), -1)
            ctx = torch.bmm(w[:, None, :], enc)                                       # [N, 1, Hd]
            return self.output(torch.tanh(self.combine(torch.cat([s, ctx], -1))))[:, 0], state

    return Model()


def torch_step(torch, a):
    torch.manual_seed(0)
    m = make_model(torch, a).train()
    return seq2seq_train_step(torch, m, 3e-3, a.Vs, a.Vt, a.N, a.S, a.T)


def check_checkpoint(torch, a, checkpoint, tsv):
    """Loads a seq2seq-train checkpoint of this model shape (--tokenizer char --target-tokenizer space) into the
    PyTorch module and prints its mean token loss on TSV, to compare with the valid_loss seq2seq-train printed
    for the same checkpoint and file: the two modules compute the same function."""
    import json
    ck = json.load(open(checkpoint))
    cfg = ck["config"]
    a.Vs, a.Vt, a.E, a.H = int(cfg["src_vocab"]), int(cfg["tgt_vocab"]), int(cfg["embed"]), int(cfg["hidden"])
    assert cfg["cell"] == "lstm" and cfg["attention"] == "additive" and cfg["bidirectional"] == "true"
    assert cfg.get("attention_style", "luong") == "luong" and cfg["layers"] == "1"
    m = make_model(torch, a).eval()
    t = lambda x: torch.tensor(x, dtype=torch.float32)
    state = {"src_embed.weight": t(ck["src_embed"]["weight"]), "tgt_embed.weight": t(ck["tgt_embed"]["weight"]),
             "W_q": t(ck["attention"]["W_q"]), "W_k": t(ck["attention"]["W_k"]), "v": t(ck["attention"]["v"])}
    for part in ("encoder", "decoder"):
        state.update({f"{part}.{k}": t(v) for k, v in ck[part].items()})
    for part in ("combine", "output"):
        state.update({f"{part}.{k}": t(v) for k, v in ck[part].items()})
    m.load_state_dict(state)
    sv = {w: i for i, w in enumerate(ck["vocab"]["source"]["tokens"])}
    tv = {w: i for i, w in enumerate(ck["vocab"]["target"]["tokens"])}
    pairs = [line.rstrip("\n").split("\t") for line in open(tsv, encoding="utf-8") if line.strip()]
    src = [[sv.get(ch, 3) for ch in s] for s, _ in pairs]
    tgt = [[tv.get(w, 3) for w in y.split()] for _, y in pairs]
    S, T = max(map(len, src)), max(len(y) + 1 for y in tgt)
    pad = lambda rows, n: torch.tensor([r + [0] * (n - len(r)) for r in rows])
    with torch.no_grad():
        loss = m(pad(src, S), pad([[1] + y for y in tgt], T), pad([y + [2] for y in tgt], T),
                 torch.tensor([len(r) for r in src]))
    print(f"PyTorch module with {checkpoint}'s weights, mean token loss on {tsv}: {loss.item():.7f}")


def edit_distance(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def train_run(torch, a, train_tsv, test_tsv):
    """--train-run: bench/g2p.sh's recipe on this module: the same data, batch, Adam, warmup + cosine to 0 over
    --steps, clip 1, dropout and label smoothing; then greedy decoding of the test words scored as seq2seq-eval
    scores them (a word right when it equals any of its pronunciations; PER: edits to the closest one over its
    length). Prints the training wall time, target tokens/s and the scores."""
    import math
    import random
    import time
    read = lambda p: [l.rstrip("\n").split("\t") for l in open(p, encoding="utf-8") if l.strip()]
    train, test = read(train_tsv), read(test_tsv)
    specials = ["<pad>", "<bos>", "<eos>", "<unk>"]
    sv = specials + sorted({ch for s, _ in train for ch in s})
    tv = specials + sorted({w for _, y in train for w in y.split()})
    si, ti = {w: i for i, w in enumerate(sv)}, {w: i for i, w in enumerate(tv)}
    a.Vs, a.Vt = len(sv), len(tv)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    m = make_model(torch, a).train()
    opt = torch.optim.Adam(m.parameters(), lr=a.lr)
    warm = a.warmup
    rate = lambda k: a.lr * (k / warm if k < warm else 0.5 * (1 + math.cos(math.pi * (k - warm) / max(1, a.steps - warm))))
    src = [[si.get(ch, 3) for ch in s] for s, _ in train]
    tgt = [[ti.get(w, 3) for w in y.split()] for _, y in train]
    pad = lambda rows, n: torch.tensor([r + [0] * (n - len(r)) for r in rows])
    order, at, tokens = [], 0, 0
    print(f"PyTorch {torch.__version__}, {torch.get_num_threads()} threads: {len(train)} training pairs, "
          f"{a.steps} steps of batch {a.N}, H {a.H}, E {a.E}, dropout {a.dropout}, label smoothing "
          f"{a.label_smoothing}, lr {a.lr}, warmup {warm}, cosine", flush=True)
    start = time.perf_counter()
    for k in range(1, a.steps + 1):
        if at + a.N > len(order):
            order, at = list(range(len(train))), 0
            rng.shuffle(order)
        rows, at = order[at:at + a.N], at + a.N
        xs, ys = [src[i] for i in rows], [tgt[i] for i in rows]
        S, T = max(map(len, xs)), max(len(y) + 1 for y in ys)
        for g in opt.param_groups:
            g["lr"] = rate(k)
        opt.zero_grad(set_to_none=True)
        loss = m(pad(xs, S), pad([[1] + y for y in ys], T), pad([y + [2] for y in ys], T),
                 torch.tensor([len(x) for x in xs]))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        tokens += sum(len(y) + 1 for y in ys)
        if k % a.log_every == 0 or k == a.steps:
            t = time.perf_counter() - start
            print(f"step {k}: loss {loss.item():.4f}, {t:.1f} s, {tokens / t:.0f} target tokens/s", flush=True)
    seconds = time.perf_counter() - start
    m.eval()
    refs = {}
    for s, y in test:
        refs.setdefault(s, []).append(y.split())
    words = list(refs)
    wrong = edits = ref_tokens = 0
    with torch.no_grad():
        for b in range(0, len(words), 256):
            batch = words[b:b + 256]
            xs = [[si.get(ch, 3) for ch in w] for w in batch]
            lengths = torch.tensor([len(x) for x in xs])
            enc, keys, mask, state = m.encode(pad(xs, max(map(len, xs))), lengths)
            y = torch.full((len(batch),), 1, dtype=torch.long)
            out, done = [[] for _ in batch], [False] * len(batch)
            for _ in range(int(lengths.max()) + 10):
                logits, state = m.step(y, state, enc, keys, mask)
                logits[:, [0, 1, 3]] = float("-inf")  # never <pad>, <bos>, <unk> (seq2seq-eval's rule)
                y = logits.argmax(-1)
                for i, t in enumerate(y.tolist()):
                    if not done[i]:
                        if t == 2:
                            done[i] = True
                        else:
                            out[i].append(tv[t])
                if all(done):
                    break
            for w, o in zip(batch, out):
                best = min(refs[w], key=lambda r: edit_distance(o, r))
                d = edit_distance(o, best)
                wrong += d > 0
                edits += d
                ref_tokens += len(best)
    print(f"training wall time {seconds:.1f} s ({tokens / seconds:.0f} target tokens/s); {test_tsv}: "
          f"{len(words)} words, WER {100 * wrong / len(words):.2f}% ({wrong} wrong), "
          f"PER {100 * edits / ref_tokens:.2f}% ({edits} edits over {ref_tokens} reference tokens)", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build", default=os.path.join(here, "..", "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    for k, v in (("N", 64), ("S", 8), ("T", 8), ("H", 128), ("E", 64), ("Vs", 30), ("Vt", 45)):
        ap.add_argument(f"--{k}", type=int, default=v)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--train-run", nargs=2, metavar=("TRAIN_TSV", "TEST_TSV"),
                    help="instead of timing one step: train the module on TRAIN_TSV with the recipe options below "
                         "and score greedy decoding of TEST_TSV (WER, PER)")
    ap.add_argument("--steps", type=int, default=12000)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--label-smoothing", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=1000)
    ap.add_argument("--check", nargs=2, metavar=("CHECKPOINT", "TSV"),
                    help="instead of timing: the PyTorch module's mean token loss on TSV with the checkpoint's weights")
    a = ap.parse_args()
    for mode, run, given in (("--train-run", train_run, a.train_run), ("--check", check_checkpoint, a.check)):
        if given:
            torch = import_torch(a.threads)
            if torch is None:
                raise SystemExit(f"{mode} needs PyTorch")
            run(torch, a, *given)
            return
    binary = bench_binary(a.build, "seq2seq_step_bench")
    torch = import_torch(a.threads)
    step = torch_step(torch, a) if torch is not None else None
    tokens = a.N * a.T
    print(f"G2P step: N={a.N} S={a.S} T={a.T} E={a.E} H={a.H} (bidirectional, Hd={2 * a.H}) Vs={a.Vs} Vt={a.Vt} "
          f"lstm, additive attention (luong), dropout {a.dropout}, {a.threads} threads; {a.rounds} interleaved "
          f"rounds, best of {a.reps}; {tokens} target tokens per step; load average "
          f"{os.getloadavg()[0]:.1f}" + (f"; torch {torch.__version__}, {torch.get_num_threads()} threads" if torch else ""),
          flush=True)
    rows = []
    for r in range(a.rounds):
        mine = run_json(binary, N=a.N, S=a.S, T=a.T, H=a.H, E=a.E, Vs=a.Vs, Vt=a.Vt, attention="additive",
                        bidirectional=1, dropout=a.dropout, threads=a.threads, reps=a.reps)
        line = (f"round {r + 1}: attnkit {mine['best_s'] * 1e3:7.2f} ms ({tokens / mine['best_s']:8.0f} tok/s), "
                f"CPU {mine['best_cpu_s'] * 1e3:7.2f} ms ({tokens / mine['best_cpu_s']:8.0f} tok/s)")
        if step:
            wall, cpu = best_wall_and_cpu(step, a.reps)
            rows.append((mine["best_s"], mine["best_cpu_s"], wall, cpu))
            line += (f" | torch {wall * 1e3:7.2f} ms ({tokens / wall:8.0f} tok/s), CPU {cpu * 1e3:7.2f} ms "
                     f"({tokens / cpu:8.0f} tok/s) | ratio {mine['best_s'] / wall:.3f}, CPU {mine['best_cpu_s'] / cpu:.3f}")
        print(line, flush=True)
    if rows:
        med = [statistics.median(x[i] for x in rows) for i in range(4)]
        print(f"median: attnkit {tokens / med[0]:.0f} tok/s (CPU {tokens / med[1]:.0f}), torch {tokens / med[2]:.0f} "
              f"tok/s (CPU {tokens / med[3]:.0f}); time ratio attnkit / torch {statistics.median(x[0] / x[2] for x in rows):.3f} "
              f"(CPU {statistics.median(x[1] / x[3] for x in rows):.3f})")


if __name__ == "__main__":
    main()

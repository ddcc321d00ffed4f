#!/usr/bin/python3
"""Greedy decoding speed: attnkit's transformer-decode path (build/bench/decode_bench: decode::search over
the model's DecoderState, KV cache) vs PyTorch nn.Transformer's usual decoding loop, which reruns the decoder
over the whole prefix at every step. Same model (random weights, exported from PyTorch), same threads.

  /usr/bin/python3 bench/decode_vs_torch.py [--build build] [--layers 6] [--d-model 512] [--heads 8]
                                            [--ff 2048] [--vocab 1000] [--src-len 32] [--tokens 64]
                                            [--batch 64] [--threads 2] [--reps 3] [--workdir DIR]

The model: src/tgt nn.Embedding scaled by sqrt(d), sinusoidal positions, nn.Transformer(batch_first=True,
dropout 0) with `layers` encoder and decoder layers, an nn.Linear output: the names models::Transformer
loads (encoder.layers.0.self_attn.in_proj_weight ...). It is exported as config.json + state_dict.safetensors
in --workdir (183 MB for the 6+6-layer d 512 model), and decode_bench reads it.
Every source is made to produce exactly --tokens tokens (<eos> masked before), in both.
Prints tokens/s at batch 1 and --batch for both, the ratio, beam 5's peak memory (attnkit), and the
memory-bandwidth bound of batch 1 (bytes of weights read per token).
"""
import argparse
import json
import math
import struct
import os
import subprocess
import sys
import tempfile

from bench_common import bench_binary, import_torch


def build_model(torch, a):
    nn = torch.nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.src_embed = nn.Embedding(a.vocab, a.d_model)
            self.tgt_embed = nn.Embedding(a.vocab, a.d_model)
            t = nn.Transformer(d_model=a.d_model, nhead=a.heads, num_encoder_layers=a.layers,
                               num_decoder_layers=a.layers, dim_feedforward=a.ff, dropout=0.0, batch_first=True)
            self.encoder, self.decoder = t.encoder, t.decoder
            self.output = nn.Linear(a.d_model, a.vocab)
            pos = torch.arange(4096).unsqueeze(1)
            div = torch.exp(torch.arange(0, a.d_model, 2) * (-math.log(10000.0) / a.d_model))
            pe = torch.zeros(4096, a.d_model)
            pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
            self.register_buffer("pe", pe, persistent=False)

        def embed(self, table, ids):
            return table(ids) * math.sqrt(a.d_model) + self.pe[: ids.shape[1]]

    torch.manual_seed(1)
    return Model().eval()


def torch_greedy(torch, m, src, tokens, eos=2, bos=1):
    """nn.Transformer's decoding loop: the decoder reruns over the whole prefix at every step."""
    memory = m.encoder(m.embed(m.src_embed, src))
    ys = torch.full((src.shape[0], 1), bos, dtype=torch.long)
    for _ in range(tokens):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(ys.shape[1])
        h = m.decoder(m.embed(m.tgt_embed, ys), memory, tgt_mask=mask)
        logits = m.output(h[:, -1])
        logits[:, eos] = -math.inf
        ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], 1)
    return ys


def export(torch, m, a, workdir):
    tokens = ["<pad>", "<bos>", "<eos>", "<unk>"] + [str(i) for i in range(a.vocab - 4)]
    config = {"family": "transformer", "src_vocab": str(a.vocab), "tgt_vocab": str(a.vocab),
              "encoder_layers": str(a.layers), "decoder_layers": str(a.layers), "heads": str(a.heads),
              "d_model": str(a.d_model), "ff": str(a.ff), "dropout": "0", "norm_first": "false",
              "activation": "relu", "positional": "sinusoidal",
              "vocab": {"source": {"tokens": tokens}, "target": {"tokens": tokens}},
              "src_tokenizer": "ids", "tgt_tokenizer": "ids"}
    cfg = os.path.join(workdir, "config.json")
    with open(cfg, "w") as f:
        json.dump(config, f)
    sd = os.path.join(workdir, "state_dict.safetensors")
    header, blobs, offset = {}, [], 0
    for k, v in m.state_dict().items():  # safetensors by hand (Debian has no `safetensors` package)
        b = v.detach().contiguous().numpy().astype("<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(sd, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    return cfg, sd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--build", default=os.path.join(here, "..", "build"))
    for name, default in (("layers", 6), ("d-model", 512), ("heads", 8), ("ff", 2048), ("vocab", 1000),
                          ("src-len", 32), ("tokens", 64), ("batch", 64), ("threads", 2), ("reps", 3)):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    binary = bench_binary(a.build, "decode_bench")
    torch = import_torch(a.threads)
    if torch is None:
        sys.exit("decode_vs_torch needs PyTorch (to make and export the model)")
    workdir = a.workdir or tempfile.mkdtemp(prefix="decode_bench.")
    m = build_model(torch, a)
    cfg, sd = export(torch, m, a, workdir)
    params = sum(p.numel() for p in m.parameters())
    # batch 1 reads every decoder weight once per token (and the output layer); the encoder runs once
    dec = sum(p.numel() for n, p in m.named_parameters() if n.startswith(("decoder", "output", "tgt_embed")))
    print(f"torch {torch.__version__}, {a.threads} threads; model {a.layers}+{a.layers} layers, d {a.d_model}, "
          f"ff {a.ff}, vocab {a.vocab}: {params / 1e6:.1f} M parameters; source {a.src_len}, {a.tokens} tokens")
    g = torch.Generator().manual_seed(5)
    results = {}
    with torch.no_grad():
        # the same model decodes to the same tokens here and there (ids k >= 4 are the tokens "k-4")
        src = torch.randint(4, a.vocab, (1, a.src_len), generator=g)
        want = [str(int(k) - 4) for k in torch_greedy(torch, m, src, a.tokens)[0, 1:]]
        tool = os.path.join(a.build, "bin", "transformer-decode")
        run = subprocess.run([tool, cfg, "--weights", sd, "--src", " ".join(str(int(k) - 4) for k in src[0]),
                              "--min-len", str(a.tokens), "--max-len", str(a.tokens), "--threads", str(a.threads)],
                             capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"transformer-decode failed: {run.stderr.strip()}")
        got = json.loads(run.stdout)["tokens"]
        same = sum(x == y for x, y in zip(got, want))
        print(f"greedy tokens: transformer-decode == PyTorch's loop for {same} of {a.tokens}"
              + ("" if same == a.tokens else f" (first difference at {next(i for i, (x, y) in enumerate(zip(got, want)) if x != y)})"))
        for n in (1, a.batch):
            src = torch.randint(4, a.vocab, (n, a.src_len), generator=g)
            torch_greedy(torch, m, src, 4)  # warm-up
            import time
            best = float("inf")
            for _ in range(a.reps):
                t0 = time.perf_counter()
                torch_greedy(torch, m, src, a.tokens)
                best = min(best, time.perf_counter() - t0)
            results[n] = n * a.tokens / best
            print(f"PyTorch nn.Transformer loop, batch {n}: {results[n]:.1f} tokens/s")
    run = subprocess.run([binary, "--model", cfg, "--weights", sd, "--src-len", str(a.src_len), "--tokens",
                          str(a.tokens), "--batch", str(a.batch), "--threads", str(a.threads), "--reps",
                          str(a.reps)], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"decode_bench failed: {run.stderr.strip()}")
    ours = json.loads(run.stdout)
    b1, bB = ours["greedy_b1_tokens_per_s"], ours[f"greedy_b{a.batch}_tokens_per_s"]
    print(f"attnkit (KV cache), batch 1: {b1:.1f} tokens/s = {b1 / results[1]:.1f}x PyTorch")
    print(f"attnkit (KV cache), batch {a.batch}: {bB:.1f} tokens/s = {bB / results[a.batch]:.1f}x PyTorch")
    print(f"batch 1 weight traffic: {dec * 4 / 1e6:.0f} MB per token -> {b1 * dec * 4 / 1e9:.1f} GB/s read")
    print(f"beam {ours['beam']}: peak {ours['beam_peak_mb']:.0f} MB resident "
          f"({ours['beam_peak_over_model_mb']:.0f} MB above the loaded model)")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes data/pytorch.safetensors, the PyTorch side of the C++ examples (examples/cpp/*.cpp):

  the state_dict of one PyTorch module holding
    proj     nn.Linear(6, 4)
    lstm     nn.LSTM(4, 5, num_layers=2, batch_first=True)
    gru      nn.GRU(4, 5, batch_first=True, bidirectional=True)
    attn     nn.MultiheadAttention(8, 2, batch_first=True)
    encoder  nn.TransformerEncoder(2 x nn.TransformerEncoderLayer(8, 2, 16, dropout=0, batch_first=True), norm)
    decoder  nn.TransformerDecoder(2 x nn.TransformerDecoderLayer(8, 2, 16, dropout=0, batch_first=True), norm)
  beside the inputs and PyTorch's outputs, under io.*:
    io.x6 [2, 5, 6], io.x4 [2, 5, 4], io.src [2, 5, 8], io.tgt [2, 4, 8], io.dy [2, 5, 8]
    io.expected.NAME  the outputs (eval mode, no dropout): proj(x6), lstm(x4), gru(x4), attn(src, src, src),
                      encoder.layers[0](src), encoder(src), decoder.layers[0](tgt, src) and decoder(tgt,
                      encoder(src)) with the causal target mask
    io.grad.src, io.grad.linear1.weight  d sum(dy * encoder.layers[0](src)) / d src, / d its linear1.weight

Run with PyTorch 1.13 (/usr/bin/python3 examples/cpp/make_data.py); the file is committed, so the examples need
no PyTorch. The safetensors file is written by hand (8-byte header size, JSON header, little-endian float32).
"""
import json
import os
import struct

import torch
from torch import nn

torch.manual_seed(0)
E, NH, F = 8, 2, 16


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 4)
        self.lstm = nn.LSTM(4, 5, num_layers=2, batch_first=True)
        self.gru = nn.GRU(4, 5, batch_first=True, bidirectional=True)
        self.attn = nn.MultiheadAttention(E, NH, batch_first=True)
        enc = nn.TransformerEncoderLayer(E, NH, F, dropout=0.0, batch_first=True)
        dec = nn.TransformerDecoderLayer(E, NH, F, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(enc, 2, norm=nn.LayerNorm(E), enable_nested_tensor=False)
        self.decoder = nn.TransformerDecoder(dec, 2, norm=nn.LayerNorm(E))


def main():
    m = Model().eval()
    with torch.no_grad():  # the norms' weights and biases away from ones and zeros
        for name, p in m.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    t = {k: v.detach().clone() for k, v in m.state_dict().items()}
    x6, x4 = torch.randn(2, 5, 6), torch.randn(2, 5, 4)
    src, tgt, dy = torch.randn(2, 5, E), torch.randn(2, 4, E), torch.randn(2, 5, E)
    causal = nn.Transformer.generate_square_subsequent_mask(4)
    with torch.no_grad():
        out = {
            "proj": m.proj(x6),
            "lstm": m.lstm(x4)[0],
            "gru": m.gru(x4)[0],
            "attn": m.attn(src, src, src, need_weights=False)[0],
            "encoder_layer": m.encoder.layers[0](src),
            "encoder": m.encoder(src),
            "decoder_layer": m.decoder.layers[0](tgt, src, tgt_mask=causal),
            "decoder": m.decoder(tgt, m.encoder(src), tgt_mask=causal),
        }
    src_g = src.clone().requires_grad_(True)
    layer = m.encoder.layers[0]
    (layer(src_g) * dy).sum().backward()
    t.update({"io.x6": x6, "io.x4": x4, "io.src": src, "io.tgt": tgt, "io.dy": dy})
    t.update({"io.expected." + k: v for k, v in out.items()})
    t["io.grad.src"] = src_g.grad
    t["io.grad.linear1.weight"] = layer.linear1.weight.grad
    write_safetensors(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "pytorch.safetensors"), t)


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, v in tensors.items():
        data = v.detach().contiguous().to(torch.float32).numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


if __name__ == "__main__":
    main()

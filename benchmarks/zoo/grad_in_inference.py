"""Inference that builds autograd graphs it never uses (no torch.no_grad / inference_mode).

With autograd on, nn.TransformerEncoder cannot take its inference fast path, which packs the
padded batch into a nested tensor and skips the padding: every padded position is computed."""
import contextlib
import sys

import torch

torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048, batch_first=True)
model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=True)
model.eval()
embed = torch.nn.Embedding(8000, 512)
# sentences of skewed lengths (most short, a few long), batched in arrival order
lengths = (8 + torch.empty(640).exponential_(1 / 12)).clamp(max=256).long()
with torch.inference_mode() if "--fixed" in sys.argv else contextlib.nullcontext():  # PLANTED
    for start in range(0, len(lengths), 64):
        lens = lengths[start:start + 64]
        tokens = torch.randint(1, 8000, (len(lens), int(lens.max())))
        padding = torch.arange(tokens.shape[1])[None, :] >= lens[:, None]
        tokens[padding] = 0
        out = model(embed(tokens), src_key_padding_mask=padding)
        sentence_vectors = out.masked_fill(padding[..., None], 0).sum(1) / lens[:, None]

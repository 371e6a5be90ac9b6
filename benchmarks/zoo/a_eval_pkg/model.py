"""A Transformer text classifier built on nn.TransformerEncoder."""

from __future__ import annotations

import torch


class TextClassifier(torch.nn.Module):
    def __init__(self, vocab: int, dim: int = 512, layers: int = 2, heads: int = 8, classes: int = 4):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim, padding_idx=0)
        layer = torch.nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.1, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=True)
        self.head = torch.nn.Linear(dim, classes)

    def forward(self, tokens, padding):
        h = self.encoder(self.embed(tokens), src_key_padding_mask=padding)
        h = h.masked_fill(padding[..., None], 0.0)
        return self.head(h.sum(1) / (~padding).sum(1, keepdim=True))

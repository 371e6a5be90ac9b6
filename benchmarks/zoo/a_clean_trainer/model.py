"""A deep-and-wide click model: embeddings of the categorical ids, an MLP over everything."""

from __future__ import annotations

import torch


class ClickModel(torch.nn.Module):
    def __init__(self, numeric: int, cardinalities: list[int], dim: int = 16, hidden: int = 256):
        super().__init__()
        self.embeds = torch.nn.ModuleList([torch.nn.Embedding(c, dim) for c in cardinalities])
        width = numeric + dim * len(cardinalities)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, 1))
        self.wide = torch.nn.Linear(width, 1)

    def forward(self, numeric, cats):
        x = torch.cat([numeric, *[emb(cats[:, i]) for i, emb in enumerate(self.embeds)]], dim=1)
        return (self.mlp(x) + self.wide(x)).squeeze(1)

"""A residual MLP for tabular data (numeric features plus embedded categorical columns)."""

from __future__ import annotations

import torch


class ResidualBlock(torch.nn.Module):
    def __init__(self, dim: int, dropout: float = 0.1):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, 2 * dim)
        self.fc2 = torch.nn.Linear(2 * dim, dim)
        self.drop = torch.nn.Dropout(dropout)

    def forward(self, x):
        return x + self.drop(self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x)))))


class TabularResNet(torch.nn.Module):
    def __init__(self, numeric: int, cardinalities: list[int], dim: int = 64, blocks: int = 8):
        super().__init__()
        self.embeds = torch.nn.ModuleList([torch.nn.Embedding(c, 8) for c in cardinalities])
        self.inp = torch.nn.Linear(numeric + 8 * len(cardinalities), dim)
        self.blocks = torch.nn.Sequential(*[ResidualBlock(dim) for _ in range(blocks)])
        self.out = torch.nn.Sequential(torch.nn.LayerNorm(dim), torch.nn.Linear(dim, 1))

    def forward(self, numeric, categorical):
        cats = [emb(categorical[:, i]) for i, emb in enumerate(self.embeds)]
        return self.out(self.blocks(self.inp(torch.cat([numeric, *cats], dim=1)))).squeeze(1)

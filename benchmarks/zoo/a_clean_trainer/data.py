"""Synthetic click-through data: numeric features and categorical ids, kept as tensors."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

CARDINALITIES = [1000, 500, 200, 50, 24, 7]


def click_dataset(rows: int, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    numeric = torch.randn(rows, 13, generator=g)
    cats = torch.stack([torch.randint(0, c, (rows,), generator=g) for c in CARDINALITIES], dim=1)
    effects = [0.5 * torch.randn(c, generator=g) for c in CARDINALITIES]
    logit = numeric[:, :5].sum(1) * 0.4 + sum(e[cats[:, i]] for i, e in enumerate(effects)) - 0.5
    clicks = (torch.rand(rows, generator=g) < torch.sigmoid(logit)).float()
    return TensorDataset(numeric, cats, clicks)

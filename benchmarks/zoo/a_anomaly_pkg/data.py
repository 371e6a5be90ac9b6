"""Synthetic tabular regression data: house prices from numeric and categorical columns."""

from __future__ import annotations

import torch

CARDINALITIES = [12, 30, 5, 50]


def make_table(rows: int, numeric: int = 10, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, numeric, generator=g)
    cats = torch.stack([torch.randint(0, c, (rows,), generator=g) for c in CARDINALITIES], dim=1)
    effects = [torch.randn(c, generator=g) for c in CARDINALITIES]
    y = x[:, :4].sum(1) + torch.sin(x[:, 4] * 2) + sum(e[cats[:, i]] for i, e in enumerate(effects))
    return x, cats, y + 0.1 * torch.randn(rows, generator=g)


def batches(x, cats, y, batch_size: int, generator: torch.Generator):
    order = torch.randperm(len(y), generator=generator)
    for start in range(0, len(y), batch_size):
        idx = order[start:start + batch_size]
        yield x[idx], cats[idx], y[idx]

"""A training loop with a per-row Python loop in its loss; `--fixed` vectorises it."""
import sys

import torch

fixed = "--fixed" in sys.argv
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 64)
for _ in range(12):
    y = model(x)
    if fixed:
        penalty = y.abs().sum(dim=1).mean()
    else:
        penalty = sum(row.abs().sum() for row in y) / len(y)  # PLANTED
    loss = y.square().mean() + 0.01 * penalty
    loss.backward()
    opt.step()
    opt.zero_grad()

"""Per-sample features computed in a Python loop over plain lists each step."""
import sys

import torch

FIXED = "--fixed" in sys.argv

torch.manual_seed(0)
model = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
rows = [[float(i * j % 7) for j in range(64)] for i in range(4000)]
rows_t = torch.tensor(rows)
for _ in range(100):
    if FIXED:
        x = (rows_t * 0.5 + (rows_t > 3))[:256]
    else:
        feats = [[v * 0.5 + (v > 3) for v in row] for row in rows]  # PLANTED
        x = torch.tensor(feats[:256])
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()

"""Per-sample losses read one .item() at a time to build a Python list every step."""
import sys

import torch

FIXED = "--fixed" in sys.argv

torch.manual_seed(0)
model = torch.nn.Linear(32, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(80):
    per_sample = (model(torch.randn(20000, 32)) - 1).pow(2).squeeze(1)
    if FIXED:
        history = per_sample.tolist()
    else:
        history = [per_sample[i].item() for i in range(per_sample.shape[0])]  # PLANTED
    loss = per_sample.mean()
    loss.backward()
    opt.step()
    opt.zero_grad()

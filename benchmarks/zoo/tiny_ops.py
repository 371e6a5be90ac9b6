"""Per-row arithmetic on tiny tensors: thousands of small ops per step."""
import sys

import torch

FIXED = "--fixed" in sys.argv

torch.manual_seed(0)
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(100):
    x = torch.randn(1000, 16)
    y = model(x)
    if FIXED:
        acc = (y.relu() * 0.5 - y.sigmoid()).sum(0)
    else:
        acc = torch.zeros(16)
        for row in y:
            acc = acc + row.relu() * 0.5 - row.sigmoid()  # PLANTED
    loss = acc.sum()
    loss.backward()
    opt.step()
    opt.zero_grad()

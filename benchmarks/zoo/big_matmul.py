"""One oversized matrix product dominates each training step."""
import sys

import torch

FIXED = "--fixed" in sys.argv

torch.manual_seed(0)
model = torch.nn.Linear(128, 128)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
a = torch.randn(2048, 2048)
b = torch.randn(2048, 2048)
for _ in range(25):
    loss = model(torch.randn(32, 128)).sum()
    c = a[:1] @ b[:, :1] if FIXED else a @ b  # PLANTED
    loss = loss + c[0, 0] * 0
    loss.backward()
    opt.step()
    opt.zero_grad()

"""A step that waits (sleeps, as on slow I/O) in one function and computes in another."""
import time

import torch

torch.manual_seed(0)
model = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def read_batch():
    time.sleep(0.02)  # PLANTED: 20 ms of waiting, no CPU
    return torch.randn(64, 256)


for _ in range(12):
    x = read_batch()
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()

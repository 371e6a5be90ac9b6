"""Thousands of tiny torch calls per training step: the profiler's per-op cost dominates them."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 64)
for _ in range(16):
    y = model(x)
    penalty = sum(float(v) for v in y.detach()[:, :8].flatten())  # PLANTED: 2048 scalar reads
    loss = y.square().mean() + 0.0 * penalty
    loss.backward()
    opt.step()
    opt.zero_grad()

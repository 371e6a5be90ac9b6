"""A small model compiled for training (aot_eager: no C++ compile), with BatchNorm (buffers
updated in place) and Dropout (random numbers): a correct compile that --accuracy must pass."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1))
compiled = torch.compile(model, backend="aot_eager")  # TRAIN compile
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):
    x, y = torch.randn(64, 16), torch.randn(64, 1)
    loss = nn.functional.mse_loss(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.4f} running_mean {model[1].running_mean.abs().sum().item():.4f}")

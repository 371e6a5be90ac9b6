"""Trains a small classifier for a few steps, then evaluates it over a noise sweep one sample at a
time: per-example records kept by giving the evaluation loader batch_size=1."""
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x, y = torch.randn(2048, 32), torch.randint(0, 4, (2048,))
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                            torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(20):
    idx = torch.randint(0, 2048, (64,))
    loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()


@torch.inference_mode()
def evaluate(loader):
    correct = []
    for xb, yb in loader:
        pred = model(xb).argmax(-1)
        correct.append(pred == yb)
    return torch.cat(correct).float().mean().item()


eval_bs = 256 if "--fixed" in sys.argv else 1  # PLANTED
for noise in (0.0, 0.5, 1.0):
    loader = DataLoader(TensorDataset(x + noise * torch.randn_like(x), y), batch_size=eval_bs)
    print(noise, evaluate(loader))

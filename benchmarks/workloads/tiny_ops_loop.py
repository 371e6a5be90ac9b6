"""A loop of tiny tensor ops with no optimizer, DataLoader or nn.Module: no step clock (~3 s bare)."""
import torch

x = torch.randn(64)
acc = torch.zeros(64)
for _ in range(60_000):
    acc = acc * 0.99 + x.sin() * 0.01
print(float(acc.sum()))

"""Plain eager PyTorch: nothing for torch.compile diagnostics to report."""
import torch

w = torch.randn(64, 64)
for _ in range(20):
    x = torch.randn(8, 64)
    y = torch.tanh(x @ w)
print(float(y.sum()))

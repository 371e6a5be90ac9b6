"""Three optimizer steps of over two seconds each (a full-batch fit): with three warm-up steps the
window would begin after the last one, and record nothing."""
import time

import torch

torch.manual_seed(0)
w = torch.nn.Parameter(torch.randn(64, 64))
opt = torch.optim.SGD([w], lr=1e-3)
x = torch.randn(256, 64)
for _ in range(3):
    began = time.perf_counter()
    opt.zero_grad()
    while time.perf_counter() - began < 2.2:
        (x @ w).tanh().sum().backward()
    opt.step()
print(float(w.sum()))

"""A training loop with record_function labels, for `torchneck run`: "FORWARD" around the model,
"MASK INDICES" around a host round trip (`.item()`, NumPy's `argwhere` on a float64 mask) that
takes most of each step outside any torch op."""

import numpy as np
import torch
from torch.autograd.profiler import record_function

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
mask = torch.rand(96, 96, 96, dtype=torch.double)

for step in range(12):
    with record_function("FORWARD"):
        out = model(x)
    with record_function("MASK INDICES"):
        threshold = out.mean().item()  # LABEL-OPS
        idx = np.argwhere(mask.cpu().numpy() > 0.5 + 0.01 * threshold)
    loss = out.sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
print(len(idx))

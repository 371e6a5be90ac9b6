"""A soft mask built from float64 data (NumPy's default) and used in float64 arithmetic every step
(its temperature annealed step by step, so it is not the same value every time)."""
import sys

import numpy as np
import torch

torch.manual_seed(0)
np.random.seed(0)
model = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
weights_np = np.random.rand(512, 512, 16)  # PLANTED
if "--fixed" in sys.argv:
    weights_np = weights_np.astype(np.float32)
for step in range(80):
    x = torch.randn(64, 256)
    loss = model(x).pow(2).mean()
    temperature = 1.0 + step / 80
    mask = torch.sigmoid((torch.from_numpy(weights_np) - 0.5) * temperature)
    loss = loss + mask.mean().float() * 0
    loss.backward()
    opt.step()
    opt.zero_grad()

"""A mask built in float64 (NumPy's default) and used in float64 arithmetic every step."""
import numpy as np
import torch

torch.manual_seed(0)
model = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
weights_np = np.random.rand(512, 512, 32)
for _ in range(30):
    x = torch.randn(64, 256)
    loss = model(x).pow(2).mean()
    mask = torch.from_numpy(weights_np) * 2.0 + 1.0  # PLANTED
    loss = loss + mask.mean().float() * 0
    loss.backward()
    opt.step()
    opt.zero_grad()

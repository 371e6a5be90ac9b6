"""A CUDA training step that builds a float64 mask each step (for GPU machines only)."""
import torch
from torch import nn

model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(4096, 2048, device="cuda")
y = torch.randint(0, 10, (4096,), device="cuda")
for step in range(30):
    opt.zero_grad()
    noise = torch.rand(4096, 2048, device="cuda", dtype=torch.float64)  # PLANTED: float64 mask
    keep = (noise > 0.1).float()
    loss = nn.functional.cross_entropy(model(x * keep), y)
    loss.backward()
    opt.step()

"""A tiny model compiled with mode='reduce-overhead' (CUDA graphs by inductor; GPU machines only)."""
import torch
from torch import nn

model = nn.Sequential(*[m for _ in range(12) for m in (nn.Linear(64, 64), nn.ReLU())]).cuda()
step_fn = torch.compile(model, mode="reduce-overhead")
x = torch.randn(4, 64, device="cuda")
for step in range(40):
    with torch.no_grad():
        out = step_fn(x)
    torch.cuda.synchronize()

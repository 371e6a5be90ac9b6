"""Trains a small denoiser, then samples from it by iterating the model on its own output, with
autograd on: every step's graph is chained to the last, so all of them (and their activations)
are kept until the loop ends. With --no-grad the sampling runs under torch.no_grad()."""
import sys

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.SiLU(), torch.nn.Linear(512, 512), torch.nn.SiLU(),
                            torch.nn.Linear(512, 64))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(30):
    clean = torch.randn(256, 64)
    loss = (model(clean + 0.1 * torch.randn_like(clean)) - clean).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


def sample(n, steps=150):
    x = torch.randn(n, 64)
    for _ in range(steps):
        x = x - 0.05 * model(x)
    return x


model.eval()
if "--no-grad" in sys.argv:
    with torch.no_grad():
        points = sample(512)
else:
    points = sample(512)  # PLANTED
print("sampled", tuple(points.shape), round(points.norm(dim=1).mean().item(), 3))

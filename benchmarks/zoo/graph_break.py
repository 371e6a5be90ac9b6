"""A compiled model whose forward prints progress (a graph break) inside its refinement loop:
dynamo cannot resume inside a loop, so the whole forward runs eagerly, uncompiled."""
import sys

import torch

FIXED = "--fixed" in sys.argv


class Denoiser(torch.nn.Module):
    """Reaction-diffusion smoothing of an image batch with learned per-row rates."""

    def __init__(self, height: int, steps: int):
        super().__init__()
        self.rate = torch.nn.Parameter(torch.full((height, 1), 0.1))
        self.decay = torch.nn.Parameter(torch.full((height, 1), 0.01))
        self.steps = steps

    def forward(self, u):
        for i in range(self.steps):
            lap = (torch.roll(u, 1, -1) + torch.roll(u, -1, -1) + torch.roll(u, 1, -2) + torch.roll(u, -1, -2)
                   - 4 * u)
            u = u + self.rate * lap - self.decay * u * u * u
            if not FIXED:
                print(f"refinement step {i}", end="\r")  # PLANTED
        return u


torch.manual_seed(0)
model = torch.compile(Denoiser(512, 8).eval())
with torch.inference_mode():
    for _ in range(1500):
        out = model(torch.rand(1, 512, 512))

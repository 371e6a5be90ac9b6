"""Train a denoising autoencoder on synthetic shapes.

    python train.py [--steps 40] [--fixed]

--fixed sets as many intra-op threads as this process may use cores."""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from model import AutoEncoder
from perf import tune_cpu


def shapes(batch: int, size: int, g: torch.Generator) -> torch.Tensor:
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    centers = torch.randint(12, size - 12, (batch, 2, 1, 1), generator=g)
    radius = torch.randint(5, 12, (batch, 1, 1), generator=g)
    disc = ((yy - centers[:, 0]) ** 2 + (xx - centers[:, 1]) ** 2) < radius ** 2
    return disc.float().unsqueeze(1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--fixed", action="store_true", help="one thread per usable core")
    args = ap.parse_args()
    threads = tune_cpu(fixed=args.fixed)
    print(f"intra-op threads: {threads}")
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = AutoEncoder()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3, foreach=True)
    for step in range(args.steps):
        clean = shapes(16, 64, g)
        noisy = (clean + 0.3 * torch.randn(clean.shape, generator=g)).clamp(0, 1)
        loss = F.binary_cross_entropy(model(noisy), clean)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 20 == 19:
            print(f"step {step + 1}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

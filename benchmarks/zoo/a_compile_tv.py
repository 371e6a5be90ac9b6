"""Edge-preserving denoising of camera frames with a compiled nn.Module.

The forward stops early when the update is small: a data-dependent branch inside the loop,
which dynamo cannot compile or resume, so the whole forward falls back to eager. The frames
never converge within the iteration budget, so --fixed (no early-exit check) computes the
same result, compiled into one graph."""

from __future__ import annotations

import argparse

import torch

FIXED = False


class DiffusionDenoiser(torch.nn.Module):
    """Perona-Malik anisotropic diffusion: smooth within regions, keep the edges."""

    def __init__(self, iterations: int = 20, rate: float = 0.2, kappa: float = 0.15, tol: float = 1e-7):
        super().__init__()
        self.iterations, self.rate, self.kappa, self.tol = iterations, rate, kappa, tol

    def forward(self, noisy):
        x = noisy
        for _ in range(self.iterations):
            flow = torch.zeros_like(x)
            for shift, dim in ((1, -1), (-1, -1), (1, -2), (-1, -2)):
                d = torch.roll(x, shift, dim) - x
                flow = flow + d / (1 + (d / self.kappa) ** 2)
            update = self.rate * flow
            x = x + update
            if not FIXED and update.abs().max() < self.tol:  # PLANTED
                break
        return x


def frames(count: int, size: int, seed: int = 0):
    """A scene of stripes drifting one pixel per frame, with sensor noise."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    scene = (torch.sin(12 * xx) * torch.cos(9 * yy) > 0).float() * 0.6 + 0.2
    for i in range(count):
        yield (torch.roll(scene, i, -1) + 0.3 * torch.rand(size, size, generator=g) - 0.15)[None]


def main() -> None:
    global FIXED
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=int, default=800)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--fixed", action="store_true", help="no early-exit check")
    args = ap.parse_args()
    FIXED = args.fixed
    model = torch.compile(DiffusionDenoiser().eval())
    total = 0.0
    with torch.inference_mode():
        for frame in frames(args.frames, args.size):
            total += float(model(frame).mean())
    print(f"mean intensity {total / args.frames:.5f}")


if __name__ == "__main__":
    main()

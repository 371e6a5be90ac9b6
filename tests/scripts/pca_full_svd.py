"""Principal axes of a tall data matrix, fitted once per part of the data: no step loop, three
calls doing nearly all the work. torch.linalg.svd's default full_matrices=True builds a 5000 x
5000 U that nothing uses; `--fixed` asks for the thin factors."""
import sys

import torch


def principal_axes(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    z = x - x.mean(0)
    if "--fixed" in sys.argv:
        _, s, vh = torch.linalg.svd(z, full_matrices=False)
    else:
        u, s, vh = torch.linalg.svd(z)  # PLANTED
    return vh[:k], s[:k] ** 2 / (len(x) - 1)


torch.manual_seed(0)
data = torch.randn(15000, 64) @ torch.randn(64, 64)
for i, part in enumerate(data.split(5000)):
    axes, variance = principal_axes(part, 8)
    print(i, tuple(axes.shape), round(float(variance.sum()), 2))

"""A tiny function compiled with inductor (for `torchneck compile --cold`)."""
import torch


@torch.compile
def f(x):
    return (x.sin() * 2).relu().sum(dim=1)


for _ in range(5):
    f(torch.randn(64, 32))

"""fullgraph=True on a function with a data-dependent branch: dynamo refuses to capture it."""
import torch


@torch.compile(fullgraph=True)
def clip(x):
    if x.sum() > 0:  # FULLGRAPH branch
        return x - 1
    return x + 1


for _ in range(3):
    clip(torch.randn(32))  # FULLGRAPH call

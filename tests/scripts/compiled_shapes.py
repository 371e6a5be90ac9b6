"""A compiled function called with four batch sizes and dynamic=False: each new size recompiles."""
import torch


@torch.compile(backend="eager", dynamic=False)
def normalise(x):
    return x / x.norm(dim=1, keepdim=True)  # SHAPES


for batch in (4, 5, 6, 7, 4, 5):
    normalise(torch.randn(batch, 8))

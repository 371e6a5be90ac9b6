"""The PyTorch profiler tutorial's model: mask indices found with a NumPy argwhere round trip."""
import sys

import numpy as np
import torch

FIXED = "--fixed" in sys.argv


class MyModule(torch.nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features, bias)

    def forward(self, x, mask):
        out = self.linear(x)
        threshold = out.sum(axis=1).mean()
        if FIXED:
            hi_idx = torch.nonzero(mask > threshold)
        else:
            hi_idx = np.argwhere(mask.cpu().numpy() > threshold.item())  # PLANTED
            hi_idx = torch.from_numpy(hi_idx)
        return out, hi_idx


torch.manual_seed(0)
model = MyModule(500, 10)
x = torch.rand(128, 500)
mask = torch.rand((256, 256, 256))
for _ in range(12):
    out, idx = model(x, mask)

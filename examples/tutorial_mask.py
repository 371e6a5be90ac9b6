"""The PyTorch profiler tutorial's example: a model whose forward builds a float64 mask and
round-trips it through NumPy to find indices. `torchneck run examples/tutorial_mask.py` finds both.
"""

import argparse

import numpy as np
import torch
from torch import nn


class MyModule(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias)

    def forward(self, input, mask):
        out = self.linear(input)
        threshold = out.sum(axis=1).mean().item()
        hi_idx = np.argwhere(mask.cpu().numpy() > threshold)  # NumPy round trip
        hi_idx = torch.from_numpy(hi_idx)
        return out, hi_idx


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = MyModule(500, 10)
    inp = torch.rand(128, 500)
    mask = torch.rand((args.size, args.size, args.size // 8), dtype=torch.double)  # float64 mask
    with torch.no_grad():
        for _ in range(args.iterations):
            out, idx = model(inp, mask)
    print(f"last batch: {tuple(out.shape)}, {len(idx)} indices above threshold")


if __name__ == "__main__":
    main()

"""The PyTorch profiler tutorial's example: a model whose forward builds a float64 mask and
round-trips it through NumPy to find indices. `torchneck run examples/tutorial_mask.py` finds both.
`--fixed` applies the tutorial's fixes (a float32 mask, `nonzero()` instead of NumPy), so

    torchneck run --out runs/before examples/tutorial_mask.py
    torchneck run --out runs/after examples/tutorial_mask.py --fixed
    torchneck diff runs/before runs/after

tells the tutorial's before/after story.
"""

import argparse

import numpy as np
import torch
from torch import nn


class MyModule(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True, fixed: bool = False):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias)
        self.fixed = fixed

    def forward(self, input, mask):
        out = self.linear(input)
        threshold = 0.9 + 0.05 * out.mean().tanh()  # data-dependent, near the mask's top decile
        if self.fixed:  # stays in torch: no host round trip, no float64
            return out, (mask > threshold).nonzero()
        hi_idx = np.argwhere(mask.cpu().numpy() > threshold.item())  # NumPy round trip
        hi_idx = torch.from_numpy(hi_idx)
        return out, hi_idx


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--fixed", action="store_true", help="apply the tutorial's fixes")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = MyModule(500, 10, fixed=args.fixed)
    inp = torch.rand(128, 500)
    dtype = torch.float32 if args.fixed else torch.double  # the unfixed mask is float64
    mask = torch.rand((args.size, args.size, args.size // 8), dtype=dtype)
    with torch.no_grad():
        for _ in range(args.iterations):
            out, idx = model(inp, mask)
    print(f"last batch: {tuple(out.shape)}, {len(idx)} indices above threshold")


if __name__ == "__main__":
    main()

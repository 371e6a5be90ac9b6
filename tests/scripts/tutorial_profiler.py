"""The PyTorch profiler tutorial's code ("Profiling your PyTorch module", the seed document
003), as it is written there: `record_function` labels around a linear pass and a mask-index
pass that copies a float64 mask to the host and calls NumPy's `argwhere`, profiled with
`with_stack=True, profile_memory=True`, the trace exported with `export_chrome_trace`.

Two changes, so that it runs anywhere: the device is CUDA when there is one, else the CPU (the
tutorial calls `.cuda()`), and the mask's side is an argument (the tutorial's 500 makes a 1 GB
float64 mask; the tests use a smaller one). Also prints torch's own
`key_averages(group_by_stack_n=5).table(sort_by="self_cpu_time_total", row_limit=5)`.

    python tests/scripts/tutorial_profiler.py OUT.json [--side N] [--fixed]

`--fixed` runs the tutorial's final version (a float32 mask, `nonzero()` in torch).
"""

import argparse

import numpy as np
import torch
import torch.autograd.profiler as profiler
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--side", type=int, default=500)
parser.add_argument("--fixed", action="store_true")
args = parser.parse_args()
device = "cuda" if torch.cuda.is_available() else "cpu"


class MyModule(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super(MyModule, self).__init__()
        self.linear = nn.Linear(in_features, out_features, bias)

    def forward(self, input, mask):
        with profiler.record_function("LINEAR PASS"):
            out = self.linear(input)

        with profiler.record_function("MASK INDICES"):
            threshold = out.sum(axis=1).mean().item()
            hi_idx = np.argwhere(mask.cpu().numpy() > threshold)
            hi_idx = torch.from_numpy(hi_idx).to(device)

        return out, hi_idx


class FixedModule(MyModule):
    def forward(self, input, mask):
        with profiler.record_function("LINEAR PASS"):
            out = self.linear(input)

        with profiler.record_function("MASK INDICES"):
            threshold = out.sum(axis=1).mean()
            hi_idx = (mask > threshold).nonzero(as_tuple=True)

        return out, hi_idx


torch.manual_seed(0)
model = (FixedModule if args.fixed else MyModule)(500, 10).to(device)
input = torch.rand(128, 500).to(device)
dtype = torch.float if args.fixed else torch.double
mask = torch.rand((args.side, args.side, args.side), dtype=dtype).to(device)

# warm-up
model(input, mask)

with profiler.profile(with_stack=True, profile_memory=True) as prof:
    out, idx = model(input, mask)

prof.export_chrome_trace(args.out)
print(prof.key_averages(group_by_stack_n=5).table(sort_by="self_cpu_time_total", row_limit=5))

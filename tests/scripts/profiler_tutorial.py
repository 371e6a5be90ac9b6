"""The code of PyTorch's profiler tutorial ("Profiling your PyTorch module"), verbatim, except:
on the CPU (no .cuda()), and a smaller mask (the tutorial's 500x500x500 float64 mask is 1 GB).
The last lines print every row of the table in a stable form, for the test to compare with a
plain `python` run."""
import torch
import numpy as np
from torch import nn
import torch.autograd.profiler as profiler


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
            hi_idx = torch.from_numpy(hi_idx)

        return out, hi_idx


model = MyModule(500, 10)
input = torch.rand(128, 500)
mask = torch.rand((160, 160, 160), dtype=torch.double)

# warm-up
model(input, mask)

with profiler.profile(with_stack=True, profile_memory=True) as prof:
    out, idx = model(input, mask)

print(prof.key_averages(group_by_stack_n=5).table(sort_by='self_cpu_time_total', row_limit=5))

import json  # noqa: E402  (the test's lines)
import re  # noqa: E402

rows = sorted((re.sub(r"0x[0-9a-f]+", "0x...", e.key), tuple(e.stack), e.count)
              for e in prof.key_averages(group_by_stack_n=5))
print("ROWS " + json.dumps(rows))

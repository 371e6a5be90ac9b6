"""More intra-op threads than cores: the threads spin and wait on each other.

A deep MLP of mid-sized layers: every op is big enough to run in parallel, and each parallel
region must wake and join all the threads, time-sliced on too few cores."""
import os
import sys

import torch

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
torch.set_num_threads(CORES if "--fixed" in sys.argv else 4 * CORES)  # PLANTED
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.LayerNorm(256), torch.nn.GELU())
                              for _ in range(12)])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(200):
    loss = model(torch.randn(256, 256)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()

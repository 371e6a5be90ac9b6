"""More intra-op threads than cores: the threads spin and wait on each other."""
import os
import sys

import torch

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
torch.set_num_threads(CORES if "--fixed" in sys.argv else 4 * CORES)  # PLANTED
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(60):
    loss = model(torch.randn(128, 512)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()

"""Training steps inside the user's own record_function spans.

`per-step`: one span around each step (the optimizer's clock ticks inside it).
`whole-loop`: one span around the whole loop (it never closes before the run ends).
"""
import sys

import torch
from torch.autograd.profiler import record_function

mode = sys.argv[1] if len(sys.argv) > 1 else "per-step"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def step():
    x = torch.randn(128, 64)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()


if mode == "whole-loop":
    with record_function("all_steps"):
        for _ in range(14):
            step()
else:
    for _ in range(14):
        with record_function("train_step"):
            step()

"""A phase without steps (torchneck profiles a time slice of it), then training steps inside the
user's own record_function spans (torchneck replaces the slice by a window of steps, once, when
no span opened under the slice's profiler session can still close under the next one).

`per-step`: one span around each step (the optimizer's clock ticks inside it).
`whole-loop`: one span around the whole loop (it never closes before the run ends).
"""
import sys
import time

import torch
from torch.autograd.profiler import record_function

mode = sys.argv[1] if len(sys.argv) > 1 else "per-step"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

x = torch.randn(256)
t0 = time.perf_counter()
while time.perf_counter() - t0 < 2.0:  # preparing data: no optimizer, no DataLoader, no module
    with record_function("prepare"):
        x = (x * 1.0001).tanh()


def step():
    inputs = torch.randn(128, 64)
    loss = model(inputs).square().mean()
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

"""Trains a few steps, then ends with os._exit, as watchdogs and some launchers do: no finally
blocks, no atexit handlers, no flush."""
import os
import sys

import torch

model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(12):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("trained", flush=True)
try:
    os._exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
finally:
    print("a finally block after os._exit must not run", flush=True)

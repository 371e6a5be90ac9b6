"""A slow start (a second before the first step, as CUDA initialisation or loading data takes),
then a short training loop: the start-up must stay out of the steady-state figures."""

import time

import torch

time.sleep(1.0)  # SLOW START
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
for step in range(10):
    loss = model(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()

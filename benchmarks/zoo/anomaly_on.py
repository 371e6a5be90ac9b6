"""Autograd anomaly detection left on in a training loop."""
import sys

import torch

torch.autograd.set_detect_anomaly("--fixed" not in sys.argv)  # PLANTED
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()) for _ in range(24)])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(600):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()

"""An op called from a helper function: the report must name the helper's line, not the caller's."""
import signal
import time

import torch

fired = []
signal.signal(signal.SIGALRM, lambda *a: fired.append(1))  # the script's own timer must keep working
signal.setitimer(signal.ITIMER_REAL, 0.05)

torch.manual_seed(0)
a = torch.randn(600, 600)
b = torch.randn(600, 600)
model = torch.nn.Linear(8, 8)


def project(x):
    return torch.mm(x, b)  # PLANTED


for step in range(10):
    model(torch.randn(2, 8))  # one top-level module call per step: the step clock
    y = project(a)
    y.sum().item()

deadline = time.time() + 5
while not fired and time.time() < deadline:
    time.sleep(0.01)
raise SystemExit(0 if fired else 5)

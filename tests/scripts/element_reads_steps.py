"""Validation with a hand-written confusion count: each batch is scored by a model (a module call:
the module clock's step), then counted element by element with `.item()`, ~12,000 torch calls
between two ticks. The window must stay bounded inside such a step."""
from collections import defaultdict

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
counts: dict = defaultdict(int)
with torch.inference_mode():
    for _ in range(30):
        x, target = torch.randn(4096, 64), torch.randint(0, 10, (4096,))
        pred = model(x).argmax(1)
        for i in range(len(pred)):
            counts[(target[i].item(), pred[i].item())] += 1  # PLANTED
print(len(counts))

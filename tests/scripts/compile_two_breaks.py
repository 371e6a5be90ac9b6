"""A model compiled with inductor whose forward breaks the graph twice: a `.item()` whose value
then enters the next graph as a constant (so the graph after the break recompiles when it
changes), and a data-dependent branch."""
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 32)
        self.b = nn.Linear(32, 32)
        self.c = nn.Linear(32, 4)

    def forward(self, x):
        h = self.a(x).relu()
        scale = h.mean().item()  # BREAK item
        h = self.b(h * scale).relu()
        if h.sum() > 0:  # BREAK branch
            h = h * 2
        return self.c(h)


torch.manual_seed(0)
model = Net()
compiled = torch.compile(model)
with torch.no_grad():
    for step in range(12):
        out = compiled(torch.randn(16, 32))  # TWO BREAKS call

"""A compiled forward (aot_eager: no C++ compile) with a graph break that runs 3 ms of Python
eagerly between its two graphs on every call: the wall split must show it."""
import time

import torch

model = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


@torch.compile(backend="aot_eager")
def forward(x):
    y = model(x).relu()
    time.sleep(0.003)  # SPLIT eager
    return (y * 2).sum()


for _ in range(20):
    loss = forward(torch.randn(64, 256))
    loss.backward()
    opt.step()
    opt.zero_grad()

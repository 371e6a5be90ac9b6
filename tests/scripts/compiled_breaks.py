"""A compiled function with two graph breaks (a print, a data-dependent branch) and a second one
recompiled for every new Python int until the recompile limit."""
import torch


@torch.compile(backend="eager")
def step(x):
    y = x.sin()
    print("step")  # BREAK print
    if y.sum() > 0:  # BREAK branch
        return y.cos()
    return y


@torch.compile(backend="eager", dynamic=False)
def scale(x, n):
    return x * n + 1  # RECOMPILE int


x = torch.rand(16, 8) + 0.1  # sin(x) > 0: the branch with ops is taken
for i in range(12):
    step(x)
    scale(x, i)

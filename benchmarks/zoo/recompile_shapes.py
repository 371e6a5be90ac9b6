"""A compiled loss recompiled for every new batch size (shapes forced static).

The batches come from groups of different sizes; the recompile limit was raised to stop
dynamo's "hit recompile_limit" warning, so every new size is compiled again."""
import sys

import torch
import torch.nn.functional as F

torch._dynamo.config.cache_size_limit = 64


@torch.compile(backend="aot_eager", dynamic=None if "--fixed" in sys.argv else False)  # PLANTED
def loss_fn(model, x, target):
    logits = model(x)
    return F.cross_entropy(logits, target, label_smoothing=0.1) + 1e-4 * logits.pow(2).mean()


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                            torch.nn.Linear(128, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                            torch.nn.Linear(128, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(64):
    n = 8 + 3 * (step % 16)
    loss = loss_fn(model, torch.randn(n, 32), torch.randint(0, 10, (n,)))
    loss.backward()
    opt.step()
    opt.zero_grad()

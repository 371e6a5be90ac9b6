"""A compiled loss recompiled for every new batch size (shapes forced static)."""
import torch


@torch.compile(backend="eager", dynamic=False)  # PLANTED
def loss_fn(pred, target):
    return ((pred - target) ** 2).mean() + pred.abs().mean() * 0.01


torch.manual_seed(0)
model = torch.nn.Linear(32, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(40):
    n = 8 + step % 12
    loss = loss_fn(model(torch.randn(n, 32)), torch.randn(n, 1))
    loss.backward()
    opt.step()
    opt.zero_grad()

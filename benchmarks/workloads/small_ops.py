"""Many tiny ops per step: the dispatch-bound case (~3 s bare)."""
import torch

w = torch.randn(16, 16, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.01)
for _step in range(400):
    x = torch.randn(8, 16)
    h = x
    for _ in range(20):
        h = torch.tanh(h @ w) * 0.5 + 0.1
    loss = h.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

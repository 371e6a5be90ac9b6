"""A mean-aggregating graph layer whose row-normalised adjacency (under 1 % non-zeros) is built
dense by a helper and registered as a buffer of the aggregator: it is never a model input, and
every layer multiplies each zero."""
import sys

import torch


def mean_adjacency(src, dst, n):
    adj = torch.zeros(n, n)  # PLANTED
    adj[dst, src] = 1.0
    return adj / adj.sum(1, keepdim=True).clamp(min=1)


class Aggregator(torch.nn.Module):
    def __init__(self, src, dst, n):
        super().__init__()
        self.register_buffer("adj", mean_adjacency(src, dst, n))

    def forward(self, h):
        return self.adj @ h


class Net(torch.nn.Module):
    def __init__(self, src, dst, n):
        super().__init__()
        self.agg = Aggregator(src, dst, n)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(3))

    def forward(self, x):
        for lin in self.layers:
            x = torch.relu(lin(x) + self.agg(x))
        return x.sum(1)


torch.manual_seed(0)
n = 1200
src = torch.arange(n).repeat_interleave(6)
dst = (src + torch.tensor([1, 2, 3, 50, 100, 200]).repeat(n)) % n
net = Net(src, dst, n)
opt = torch.optim.SGD(net.parameters(), lr=1e-3)
x, y = torch.randn(n, 32), torch.randn(n)
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 150):
    loss = ((net(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

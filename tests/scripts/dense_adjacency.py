"""A graph network over a 1,200-node ring-and-chords graph whose normalised adjacency is kept as a
dense matrix: every layer's product multiplies ~1.4 million entries of which ~1 % are not zero."""
import sys

import torch

torch.manual_seed(0)
n = 1200
src = torch.arange(n).repeat_interleave(6)
dst = (src + torch.tensor([1, 2, 3, 50, 100, 200]).repeat(n)) % n
adj = torch.zeros(n, n)
adj[src, dst] = 1.0
adj = adj + adj.t() + torch.eye(n)
norm = adj.sum(1).rsqrt()
adj = norm[:, None] * adj * norm[None, :]  # PLANTED
if "--fixed" in sys.argv:
    adj = adj.to_sparse()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(3))

    def forward(self, x, a):
        for lin in self.layers:
            x = torch.relu(a @ lin(x))
        return x.sum(1)


net = Net()
opt = torch.optim.SGD(net.parameters(), lr=1e-3)
x, y = torch.randn(n, 32), torch.randn(n)
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 150):
    loss = ((net(x, adj) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()

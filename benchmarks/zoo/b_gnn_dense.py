"""Semi-supervised node classification with a two-layer GCN (Kipf & Welling) on a co-purchase-style graph.

The graph is synthetic (a planted-partition model); the normalised adjacency D^-1/2 (A + I) D^-1/2
is built once from the edge list and every layer propagates with it.
"""
import argparse

import torch
from torch import nn


def planted_partition(n, n_classes, avg_degree, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, n_classes, (n,), generator=g)
    m = n * avg_degree * 3
    src, dst = torch.randint(0, n, (m,), generator=g), torch.randint(0, n, (m,), generator=g)
    keep = (labels[src] == labels[dst]) | (torch.rand(m, generator=g) < 0.05)
    src, dst = src[keep][: n * avg_degree], dst[keep][: n * avg_degree]
    x = torch.randn(n, 100, generator=g) * 1.5 + nn.functional.one_hot(labels, 100).float()
    return x, labels, torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])


def normalised_adjacency(edges, n):
    loops = torch.arange(n).repeat(2, 1)
    edges = torch.cat([edges, loops], 1)
    a = torch.sparse_coo_tensor(edges, torch.ones(edges.shape[1]), (n, n)).coalesce()
    a = torch.sparse_coo_tensor(a.indices(), torch.ones_like(a.values()), (n, n)).coalesce()  # drop duplicate edges
    deg = torch.sparse.sum(a, 1).to_dense()
    r = deg.rsqrt()
    i = a.indices()
    return torch.sparse_coo_tensor(i, r[i[0]] * r[i[1]], (n, n)).coalesce()


class GCN(nn.Module):
    def __init__(self, d_in, d_hidden, n_classes):
        super().__init__()
        self.w1 = nn.Linear(d_in, d_hidden)
        self.w2 = nn.Linear(d_hidden, n_classes)

    def forward(self, x, a_hat):
        h = torch.relu(a_hat @ self.w1(x))
        h = nn.functional.dropout(h, 0.5, self.training)
        return a_hat @ self.w2(h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4000)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--fixed", action="store_true", help="keep the adjacency sparse")
    args = ap.parse_args()
    torch.manual_seed(0)
    x, y, edges = planted_partition(args.nodes, 8, 5)
    a_sparse = normalised_adjacency(edges, args.nodes)
    a_hat = a_sparse if args.fixed else a_sparse.to_dense()  # PLANTED
    train = torch.zeros(args.nodes, dtype=torch.bool)
    train[torch.randperm(args.nodes)[: args.nodes // 10]] = True
    model = GCN(100, 64, 8)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for epoch in range(args.epochs):
        model.train()
        loss = nn.functional.cross_entropy(model(x, a_hat)[train], y[train])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if epoch % 10 == 9:
            model.eval()
            with torch.no_grad():
                acc = (model(x, a_hat).argmax(1)[~train] == y[~train]).float().mean()
            print(f"epoch {epoch + 1} loss {loss.item():.3f} test acc {acc:.3f}")


if __name__ == "__main__":
    main()

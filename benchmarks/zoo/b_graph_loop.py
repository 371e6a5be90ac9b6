"""Node classification on a citation-style graph with a two-layer GraphSAGE (mean aggregation).

The graph is a synthetic stochastic block model: nodes of the same community link more often.
"""
import argparse

import torch
from torch import nn


def block_model(n_nodes, n_classes, avg_degree, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, n_classes, (n_nodes,), generator=g)
    n_edges = n_nodes * avg_degree
    src = torch.randint(0, n_nodes, (n_edges,), generator=g)
    dst = torch.randint(0, n_nodes, (n_edges,), generator=g)
    same = labels[src] == labels[dst]
    keep = same | (torch.rand(n_edges, generator=g) < 0.1)
    src, dst = src[keep], dst[keep]
    src, dst = torch.cat([src, dst]), torch.cat([dst, src])  # undirected
    feats = torch.randn(n_nodes, 64, generator=g) + nn.functional.one_hot(labels, 64).float() * 1.0
    return feats, labels, src, dst


class SAGELayer(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.self_lin = nn.Linear(d_in, d_out)
        self.nbr_lin = nn.Linear(d_in, d_out)

    def forward(self, h, graph):
        if graph["fixed"]:
            src, dst, deg = graph["src"], graph["dst"], graph["deg"]
            agg = torch.zeros_like(h).index_add_(0, dst, h[src]) / deg[:, None]
        else:
            agg = torch.stack([h[nbrs].mean(0) for nbrs in graph["neighbours"]])  # PLANTED
        return self.self_lin(h) + self.nbr_lin(agg)


class GraphSAGE(nn.Module):
    def __init__(self, d_in, d_hidden, n_classes):
        super().__init__()
        self.l1 = SAGELayer(d_in, d_hidden)
        self.l2 = SAGELayer(d_hidden, n_classes)

    def forward(self, x, graph):
        return self.l2(torch.relu(self.l1(x, graph)), graph)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--fixed", action="store_true", help="aggregate with one index_add_ over the edge list")
    args = ap.parse_args()
    torch.manual_seed(0)
    x, y, src, dst = block_model(args.nodes, 7, 6)
    # adjacency lists (every node gets a self loop so no list is empty)
    loops = torch.arange(args.nodes)
    src, dst = torch.cat([src, loops]), torch.cat([dst, loops])
    order = dst.argsort()
    deg = torch.bincount(dst, minlength=args.nodes)
    neighbours = list(src[order].split(deg.tolist()))
    graph = {"fixed": args.fixed, "src": src, "dst": dst, "deg": deg.float(), "neighbours": neighbours}
    train = torch.rand(args.nodes, generator=torch.Generator().manual_seed(1)) < 0.5
    model = GraphSAGE(64, 128, 7)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        logits = model(x, graph)
        loss = nn.functional.cross_entropy(logits[train], y[train])
        opt.zero_grad()
        loss.backward()
        opt.step()
        acc = (logits[~train].argmax(1) == y[~train]).float().mean()
        print(f"epoch {epoch} loss {loss.item():.3f} test acc {acc:.3f}")


if __name__ == "__main__":
    main()

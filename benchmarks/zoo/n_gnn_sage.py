"""GraphSAGE-style node classifier on a synthetic product co-purchase graph.

A random "community" graph is generated (nodes belong to latent categories,
edges are mostly intra-category), node features are noisy category centroids,
and a two-layer mean-aggregation GraphSAGE model is trained full-batch with
Adam for a few epochs, then evaluated on a held-out node split.

Planted problem:
    `build_aggregator()` materialises the row-normalised adjacency as a dense
    N x N float tensor (`adj = torch.zeros(n, n)` ... `adj[dst, src] = 1.0`),
    and `MeanAggregator.forward()` does `self.adj @ h`.  With N=8000 nodes and
    only ~11 edges per node this is a 256 MB, 99.9 % zero matrix; every layer
    of every forward and backward pass performs an O(N^2 * D) GEMM instead of
    an O(E * D) gather/scatter, so training time is dominated by multiplying
    zeros.

Fix (--fixed):
    Keep the edge list and aggregate neighbours with `index_select` +
    `index_add_` (scatter-mean with the same in-degree normalisation), which
    gives the same result at O(E * D) cost.
"""
import argparse
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    num_nodes: int = 8000
    num_classes: int = 12
    feat_dim: int = 64
    hidden: int = 128
    avg_degree: int = 10
    intra_prob: float = 0.5
    epochs: int = 10
    lr: float = 0.01
    weight_decay: float = 5e-4
    seed: int = 0


def make_graph(cfg: Config, gen: torch.Generator):
    n = cfg.num_nodes
    labels = torch.randint(0, cfg.num_classes, (n,), generator=gen)
    centroids = torch.randn(cfg.num_classes, cfg.feat_dim, generator=gen)
    feats = centroids[labels] * 0.3 + torch.randn(n, cfg.feat_dim, generator=gen)

    num_edges = n * cfg.avg_degree // 2
    src = torch.randint(0, n, (num_edges,), generator=gen)
    # Intra-category edges: pick a random node sharing the source's label.
    order = torch.argsort(labels)
    sorted_labels = labels[order]
    starts = torch.searchsorted(sorted_labels, torch.arange(cfg.num_classes))
    counts = torch.bincount(labels, minlength=cfg.num_classes)
    lab = labels[src]
    offs = (torch.rand(num_edges, generator=gen) * counts[lab]).long()
    intra_dst = order[starts[lab] + offs]
    rand_dst = torch.randint(0, n, (num_edges,), generator=gen)
    use_intra = torch.rand(num_edges, generator=gen) < cfg.intra_prob
    dst = torch.where(use_intra, intra_dst, rand_dst)

    # Undirected, deduplicated, no self loops.
    keep = src != dst
    src, dst = src[keep], dst[keep]
    edges = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
    edges = torch.unique(edges, dim=1)
    return feats, labels, edges


def split_nodes(n: int, gen: torch.Generator):
    perm = torch.randperm(n, generator=gen)
    n_train = int(0.6 * n)
    n_val = int(0.2 * n)
    return perm[:n_train], perm[n_train:n_train + n_val], perm[n_train + n_val:]


class MeanAggregator(nn.Module):
    """Mean over in-neighbours: out[v] = mean_{u -> v} h[u]."""

    def __init__(self, edges: torch.Tensor, num_nodes: int, fixed: bool):
        super().__init__()
        self.fixed = fixed
        self.num_nodes = num_nodes
        src, dst = edges[0], edges[1]
        deg = torch.bincount(dst, minlength=num_nodes).clamp(min=1).float()
        self.register_buffer("inv_deg", (1.0 / deg).unsqueeze(1))
        if fixed:
            self.register_buffer("src", src)
            self.register_buffer("dst", dst)
        else:
            self.register_buffer("adj", build_aggregator(src, dst, num_nodes, deg))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.fixed:
            out = h.new_zeros(self.num_nodes, h.shape[1])
            out.index_add_(0, self.dst, h.index_select(0, self.src))
            return out * self.inv_deg
        return self.adj @ h


def build_aggregator(src, dst, n, deg):
    adj = torch.zeros(n, n)  # PLANTED
    adj[dst, src] = 1.0
    return adj / deg.unsqueeze(1)


class SAGELayer(nn.Module):
    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.lin_self = nn.Linear(in_dim, out_dim)
        self.lin_neigh = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, h, agg: MeanAggregator):
        return self.lin_self(h) + self.lin_neigh(agg(h))


class GraphSAGE(nn.Module):
    def __init__(self, cfg: Config, agg: MeanAggregator):
        super().__init__()
        self.agg = agg
        self.l1 = SAGELayer(cfg.feat_dim, cfg.hidden)
        self.l2 = SAGELayer(cfg.hidden, cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.num_classes)
        self.norm = nn.LayerNorm(cfg.hidden)

    def forward(self, x):
        h = F.relu(self.norm(self.l1(x, self.agg)))
        h = F.dropout(h, 0.2, self.training)
        h = F.relu(self.l2(h, self.agg))
        return self.head(h)


def accuracy(logits, labels, idx):
    return (logits[idx].argmax(1) == labels[idx]).float().mean().item()


def train(cfg: Config, model, feats, labels, splits):
    train_idx, val_idx, _ = splits
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    for epoch in range(cfg.epochs):
        model.train()
        opt.zero_grad(set_to_none=True)
        logits = model(feats)
        loss = F.cross_entropy(logits[train_idx], labels[train_idx])
        loss.backward()
        opt.step()
        if epoch % 4 == 3 or epoch == cfg.epochs - 1:
            model.eval()
            with torch.no_grad():
                val_acc = accuracy(model(feats), labels, val_idx)
            print(f"epoch {epoch:3d} loss {loss.item():.4f} val_acc {val_acc:.3f}")


def main():
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    cfg = Config()
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    t0 = time.perf_counter()
    feats, labels, edges = make_graph(cfg, gen)
    splits = split_nodes(cfg.num_nodes, gen)
    print(f"graph: {cfg.num_nodes} nodes, {edges.shape[1]} directed edges")

    agg = MeanAggregator(edges, cfg.num_nodes, args.fixed)
    model = GraphSAGE(cfg, agg)
    train(cfg, model, feats, labels, splits)

    model.eval()
    with torch.no_grad():
        test_acc = accuracy(model(feats), labels, splits[2])
    print(f"test_acc {test_acc:.3f}  time {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()

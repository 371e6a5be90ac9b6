"""Synthetic citation-style graph generation and preprocessing for GCN training."""
from dataclasses import dataclass

import torch


@dataclass
class GraphData:
    x: torch.Tensor           # [N, F] node features
    y: torch.Tensor           # [N] community labels
    edge_index: torch.Tensor  # [2, E] undirected, deduplicated
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor

    @property
    def num_nodes(self) -> int:
        return self.x.shape[0]


def stochastic_block_graph(num_nodes, num_classes, num_features, avg_degree,
                           p_intra=0.55, seed=0):
    """Planted-partition graph: most edges stay inside a community."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, num_classes, (num_nodes,), generator=g)

    num_edges = num_nodes * avg_degree // 2
    src = torch.randint(0, num_nodes, (num_edges,), generator=g)
    # pick a destination inside the same community with prob p_intra
    order = torch.argsort(y)
    counts = torch.bincount(y, minlength=num_classes)
    starts = torch.cumsum(counts, 0) - counts
    offs = (torch.rand(num_edges, generator=g) * counts[y[src]]).long()
    dst_same = order[starts[y[src]] + offs]
    dst_rand = torch.randint(0, num_nodes, (num_edges,), generator=g)
    intra = torch.rand(num_edges, generator=g) < p_intra
    dst = torch.where(intra, dst_same, dst_rand)

    keep = src != dst
    src, dst = src[keep], dst[keep]
    ei = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    # remove duplicate edges
    key = torch.unique(ei[0] * num_nodes + ei[1])
    edge_index = torch.stack([key // num_nodes, key % num_nodes])

    # noisy class-dependent features
    centers = torch.randn(num_classes, num_features, generator=g)
    x = centers[y] * 0.15 + torch.randn(num_nodes, num_features, generator=g)

    perm = torch.randperm(num_nodes, generator=g)
    n_train, n_val = int(0.1 * num_nodes), int(0.2 * num_nodes)
    train_mask = torch.zeros(num_nodes, dtype=torch.bool)
    val_mask = torch.zeros(num_nodes, dtype=torch.bool)
    test_mask = torch.zeros(num_nodes, dtype=torch.bool)
    train_mask[perm[:n_train]] = True
    val_mask[perm[n_train:n_train + n_val]] = True
    test_mask[perm[n_train + n_val:]] = True
    return GraphData(x, y, edge_index, train_mask, val_mask, test_mask)


def gcn_norm_adjacency(edge_index, num_nodes, sparse=False):
    """Symmetric normalisation  D^-1/2 (A + I) D^-1/2  from Kipf & Welling."""
    loops = torch.arange(num_nodes).repeat(2, 1)
    ei = torch.cat([edge_index, loops], dim=1)
    row, col = ei[0], ei[1]
    deg = torch.bincount(row, minlength=num_nodes).float()
    dinv = deg.pow(-0.5)
    w = dinv[row] * dinv[col]
    if sparse:
        return torch.sparse_coo_tensor(ei, w, (num_nodes, num_nodes)).coalesce()
    adj = torch.zeros(num_nodes, num_nodes)  # PLANTED
    adj[row, col] = w
    return adj

"""Synthetic attributed graph: a degree-corrected stochastic block model (one block
per class) whose nodes carry noisy, linearly mixed measurements of their class
prototype; the raw measurements are PCA-whitened before training."""
from dataclasses import dataclass

import torch


@dataclass
class CSRGraph:
    """In-neighbours of node i are col[rowptr[i]:rowptr[i + 1]]; the transposed
    lists carry the 1/deg weights that mean aggregation's backward needs."""
    rowptr: torch.Tensor
    col: torch.Tensor
    t_rowptr: torch.Tensor
    t_col: torch.Tensor
    t_weight: torch.Tensor


@dataclass
class GraphData:
    x: torch.Tensor            # (N, F) node features
    y: torch.Tensor            # (N,) class labels
    graph: CSRGraph
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor


def sample_sbm_edges(labels, num_blocks, avg_degree, p_intra, gen):
    """Every stub picks a partner in its own block with probability p_intra,
    otherwise anywhere in the graph. Returns a symmetric, deduplicated edge list."""
    n = labels.numel()
    m = n * avg_degree // 2
    # Heavy-tailed activity so that degrees are not all equal.
    activity = torch.empty(n).exponential_(1.0, generator=gen) + 0.2
    src = torch.multinomial(activity, m, replacement=True, generator=gen)

    members = torch.argsort(labels, stable=True)
    block_sizes = torch.bincount(labels, minlength=num_blocks)
    block_start = torch.cumsum(block_sizes, 0) - block_sizes
    offs = (torch.rand(m, generator=gen) * block_sizes[labels[src]]).long()
    same_block = members[block_start[labels[src]] + offs]
    anywhere = torch.randint(0, n, (m,), generator=gen)
    dst = torch.where(torch.rand(m, generator=gen) < p_intra, same_block, anywhere)

    keep = src != dst
    src, dst = src[keep], dst[keep]
    key = torch.unique(torch.cat([src * n + dst, dst * n + src]))
    return torch.stack([key // n, key % n])


def _compress(rows, cols, n):
    order = torch.argsort(rows * n + cols)
    rowptr = torch.zeros(n + 1, dtype=torch.long)
    rowptr[1:] = torch.cumsum(torch.bincount(rows, minlength=n), 0)
    return rowptr, cols[order], order


def to_csr(edge_index, n):
    dst, src = edge_index[0], edge_index[1]
    rowptr, col, _ = _compress(dst, src, n)
    t_rowptr, t_col, order = _compress(src, dst, n)
    deg = torch.bincount(dst, minlength=n).clamp(min=1).float()
    return CSRGraph(rowptr, col, t_rowptr, t_col, (1.0 / deg)[dst[order]])


def sample_attributes(labels, num_blocks, raw_dim, signal, gen):
    """Class prototype + isotropic noise, seen through a random mixing matrix
    (correlated, unevenly scaled measurement channels)."""
    prototypes = torch.randn(num_blocks, raw_dim, generator=gen)
    latent = signal * prototypes[labels] + torch.randn(labels.numel(), raw_dim, generator=gen)
    mixing = torch.randn(raw_dim, raw_dim, generator=gen) / raw_dim ** 0.5
    return (latent @ mixing) * torch.logspace(-1, 1, raw_dim)


def pca_whiten(raw, num_components, eps=1e-6, fixed=False):
    """PCA whitening: rotate onto the leading principal axes of the feature
    covariance and rescale every axis to unit variance."""
    centered = raw - raw.mean(0)
    cov = centered.T @ centered / (raw.shape[0] - 1)
    evals, evecs = torch.linalg.eigh(cov)                 # ascending order
    evals = evals.flip(0)[:num_components]
    components = evecs.flip(1)[:, :num_components].T      # (k, D)
    whitened = components @ centered.T / (evals.clamp(min=eps).sqrt()[:, None])  # (k, N)
    if fixed:
        return whitened.T.contiguous()
    return whitened.T  # PLANTED


def split_masks(n, train_frac, val_frac, gen):
    rank = torch.argsort(torch.randperm(n, generator=gen))
    n_train, n_val = int(train_frac * n), int(val_frac * n)
    return rank < n_train, (rank >= n_train) & (rank < n_train + n_val), rank >= n_train + n_val


def build_graph(num_nodes, num_blocks, avg_degree, p_intra, raw_dim, feat_dim, signal,
                train_frac, val_frac, seed, fixed=False):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, num_blocks, (num_nodes,), generator=gen)
    edge_index = sample_sbm_edges(labels, num_blocks, avg_degree, p_intra, gen)
    raw = sample_attributes(labels, num_blocks, raw_dim, signal, gen)
    x = pca_whiten(raw, feat_dim, fixed=fixed)
    return GraphData(x, labels, to_csr(edge_index, num_nodes),
                     *split_masks(num_nodes, train_frac, val_frac, gen))

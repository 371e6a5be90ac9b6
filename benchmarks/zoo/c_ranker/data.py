"""Synthetic learning-to-rank data: queries with a fixed list of candidate documents."""
import torch


def make_ltr_data(n_queries, docs_per_query, d_feat, seed):
    g = torch.Generator().manual_seed(seed)
    w_true = torch.randn(d_feat, generator=torch.Generator().manual_seed(999))
    X = torch.randn(n_queries, docs_per_query, d_feat, generator=g)
    rel = X @ w_true + 0.5 * torch.randn(n_queries, docs_per_query, generator=g)
    # graded relevance 0..4 by within-query quantile
    ranks = rel.argsort(1).argsort(1).float() / (docs_per_query - 1)
    labels = (ranks * 4).round()
    return X, labels


def iterate(X, labels, bs, gen):
    perm = torch.randperm(len(X), generator=gen)
    for i in range(0, len(X), bs):
        j = perm[i:i + bs]
        yield X[j], labels[j]

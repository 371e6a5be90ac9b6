"""Ranking losses and metrics."""
import torch


def _pairwise_hinge(scores, labels, margin):
    """RankNet-style hinge over all doc pairs of ONE query. scores, labels: (D,)"""
    diff_s = scores[:, None] - scores[None, :]
    diff_l = labels[:, None] - labels[None, :]
    mask = (diff_l > 0).float()
    return (torch.relu(margin - diff_s) * mask).sum() / mask.sum().clamp_min(1.0)


def _pairwise_hinge_batched(scores, labels, margin):
    """Same loss for a batch of queries. scores, labels: (B, D)"""
    diff_s = scores[:, :, None] - scores[:, None, :]
    diff_l = labels[:, :, None] - labels[:, None, :]
    mask = (diff_l > 0).float()
    per_q = (torch.relu(margin - diff_s) * mask).sum((1, 2)) / mask.sum((1, 2)).clamp_min(1.0)
    return per_q.mean()


def ranking_loss(scores, labels, margin=1.0, vectorized=False):
    if vectorized:
        return _pairwise_hinge_batched(scores, labels, margin)
    return torch.stack([_pairwise_hinge(s, l, margin) for s, l in zip(scores, labels)]).mean()  # PLANTED


@torch.no_grad()
def ndcg_at_k(scores, labels, k=10):
    order = scores.argsort(1, descending=True)[:, :k]
    gains = (2 ** labels.gather(1, order) - 1)
    disc = 1.0 / torch.log2(torch.arange(2, k + 2, dtype=scores.dtype))
    dcg = (gains * disc).sum(1)
    ideal = (2 ** labels.sort(1, descending=True).values[:, :k] - 1)
    return (dcg / (ideal * disc).sum(1).clamp_min(1e-9)).mean().item()

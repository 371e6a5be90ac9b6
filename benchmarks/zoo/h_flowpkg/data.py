"""Synthetic high-dimensional density-estimation data (no downloads)."""
import torch


class LowRankMixture:
    """Mixture of Gaussians living near random low-rank subspaces, plus noise."""

    def __init__(self, dim, n_components=8, rank=16, noise=0.3, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.dim = dim
        self.means = 2.0 * torch.randn(n_components, dim, generator=g)
        self.factors = torch.randn(n_components, dim, rank, generator=g) / rank ** 0.5
        self.noise = noise
        self.g = g

    def sample(self, n):
        k = torch.randint(0, self.means.shape[0], (n,), generator=self.g)
        eps = torch.randn(n, self.factors.shape[-1], generator=self.g)
        x = self.noise * torch.randn(n, self.dim, generator=self.g)
        for c in range(self.means.shape[0]):
            idx = (k == c).nonzero().squeeze(-1)
            x[idx] += self.means[c] + eps[idx] @ self.factors[c].T
        return x


def batches(dataset, batch_size, n_batches):
    for _ in range(n_batches):
        yield dataset.sample(batch_size)

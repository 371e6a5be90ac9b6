"""Build a k-means codebook for sentence embeddings (the coarse quantiser of a vector index).

The embeddings come from an upstream job as a NumPy array; k-means runs in torch
(Lloyd iterations with k-means++-style seeding from a sample).
"""
import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch


def upstream_embeddings(path, n, dim, n_topics=300, seed=0):
    """What the embedding job leaves on disk: unit vectors scattered around topic directions."""
    rng = np.random.default_rng(seed)
    topics = rng.standard_normal((n_topics, dim))
    emb = topics[rng.integers(0, n_topics, n)] + 0.7 * rng.standard_normal((n, dim))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    np.save(path, emb)


def seed_centroids(x, k, gen):
    """k-means++ seeding on a random sample of 5k points."""
    sample = x[torch.randperm(len(x), generator=gen)[:5000]]
    centroids = [sample[torch.randint(len(sample), (1,), generator=gen)].squeeze(0)]
    d2 = ((sample - centroids[0]) ** 2).sum(1)
    for _ in range(k - 1):
        nxt = sample[torch.multinomial(d2 / d2.sum(), 1, generator=gen)].squeeze(0)
        centroids.append(nxt)
        d2 = torch.minimum(d2, ((sample - nxt) ** 2).sum(1))
    return torch.stack(centroids)


def kmeans(x, k, iters, gen):
    c = seed_centroids(x, k, gen)
    x_sq = (x * x).sum(1, keepdim=True)
    for it in range(iters):
        dist = x_sq - 2 * x @ c.T + (c * c).sum(1)
        assign = dist.argmin(1)
        sums = torch.zeros_like(c).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=k).clamp(min=1).unsqueeze(1).to(x.dtype)
        c = sums / counts
        inertia = dist.gather(1, assign[:, None]).sum()
        if it % 5 == 0:
            print(f"iter {it} inertia {inertia.item():.2f}")
    return c, assign


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=40_000)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--k", type=int, default=256)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--fixed", action="store_true", help="convert the embeddings to float32")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "embeddings.npy"
        upstream_embeddings(path, args.n, args.dim)
        emb = np.load(path)
        x = torch.from_numpy(emb).float() if args.fixed else torch.from_numpy(emb)  # PLANTED
        centroids, assign = kmeans(x, args.k, args.iters, torch.Generator().manual_seed(0))
        sizes = torch.bincount(assign, minlength=args.k)
        print(f"codebook {tuple(centroids.shape)} {centroids.dtype}; cluster sizes {sizes.min()}..{sizes.max()}")
        torch.save(centroids.float(), Path(tmp) / "codebook.pt")


if __name__ == "__main__":
    main()

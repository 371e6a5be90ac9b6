"""Two-tower-ish next-item recommender trained on synthetic click logs.
User = mean of embeddings of their recent item history (EmbeddingBag) plus a
few dense features; score = dot(user, item) with sampled negatives.

Usage: python recsys.py [--fixed]
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Recommender(nn.Module):
    def __init__(self, n_items, dim, n_dense, fixed):
        super().__init__()
        self.items = nn.EmbeddingBag(n_items, dim, mode="mean", sparse=fixed)  # PLANTED
        self.user_mlp = nn.Sequential(nn.Linear(dim + n_dense, 128), nn.ReLU(), nn.Linear(128, dim))

    def user_vec(self, hist, offsets, dense):
        h = self.items(hist, offsets)
        return self.user_mlp(torch.cat([h, dense], 1))

    def item_vec(self, item_ids):
        # a bag of size one per row == plain lookup, shares the table with the history
        return self.items(item_ids.reshape(-1, 1)).reshape(*item_ids.shape, -1)


class ClickLog:
    """Synthetic sessions: items have latent clusters; history and target come from the same cluster."""

    def __init__(self, n_items, n_clusters=500, seed=0):
        self.rng = np.random.default_rng(seed)
        self.n_items = n_items
        self.cluster_of = self.rng.integers(0, n_clusters, n_items)
        order = np.argsort(self.cluster_of, kind="stable")
        bounds = np.searchsorted(self.cluster_of[order], np.arange(n_clusters + 1))
        self.members = [order[bounds[c]:bounds[c + 1]] for c in range(n_clusters)]
        self.n_clusters = n_clusters

    def batch(self, bs, n_neg):
        clusters = self.rng.integers(0, self.n_clusters, bs)
        lens = self.rng.integers(3, 30, bs)
        hist = np.concatenate([self.rng.choice(self.members[c], l) for c, l in zip(clusters, lens)])
        offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
        pos = np.array([self.rng.choice(self.members[c]) for c in clusters])
        neg = self.rng.integers(0, self.n_items, (bs, n_neg))
        dense = self.rng.standard_normal((bs, 8)).astype(np.float32)
        return (torch.from_numpy(hist), torch.from_numpy(offsets), torch.from_numpy(dense),
                torch.from_numpy(np.concatenate([pos[:, None], neg], 1)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--n-items", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--steps", type=int, default=70)
    args = ap.parse_args()
    torch.manual_seed(0)

    log = ClickLog(args.n_items)
    model = Recommender(args.n_items, args.dim, 8, args.fixed)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    t0 = time.time()
    for step in range(args.steps):
        hist, offsets, dense, cand = log.batch(256, 20)
        u = model.user_vec(hist, offsets, dense)                  # (B, d)
        v = model.item_vec(cand)                                  # (B, 1+neg, d)
        logits = torch.einsum("bd,bkd->bk", u, v)
        loss = F.cross_entropy(logits, torch.zeros(len(u), dtype=torch.long))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0:
            with torch.no_grad():
                acc = (logits.argmax(1) == 0).float().mean().item()
            print(f"step {step:4d} loss {loss.item():.4f} hit@1 {acc:.3f}")
    print(f"trained {args.steps} steps in {time.time() - t0:.2f}s")


if __name__ == "__main__":
    main()

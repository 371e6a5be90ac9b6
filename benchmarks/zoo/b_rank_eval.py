"""Offline evaluation of a matrix-factorisation recommender: recall@10 and NDCG@10 over all items.

User and item factors come from a training run (synthetic here); for each user every item is scored,
items seen in training are excluded, and the top 10 are compared with the held-out interactions.
"""
import argparse
import math

import torch

K = 10


def synthetic_model(n_users, n_items, dim, seed=0):
    g = torch.Generator().manual_seed(seed)
    users = torch.randn(n_users, dim, generator=g)
    items = torch.randn(n_items, dim, generator=g)
    popularity = torch.linspace(1, 0, n_items)
    # interactions drawn from the model's own preferences plus popularity, split into train and test
    picked = torch.cat([torch.multinomial((u @ items.T / 2 + popularity).softmax(1), 30, generator=g)
                        for u in users.split(500)])
    return users, items, picked[:, :20], picked[:, 20:]


def evaluate(users, items, train, test, fixed, chunk=250):
    discounts = 1 / torch.log2(torch.arange(2, K + 2, dtype=torch.float32))
    recall, ndcg = [], []
    for start in range(0, len(users), chunk):
        scores = users[start:start + chunk] @ items.T
        scores.scatter_(1, train[start:start + chunk], -math.inf)
        if fixed:
            top = scores.topk(K, dim=1).indices
        else:
            top = scores.argsort(dim=1, descending=True)[:, :K]  # PLANTED
        hits = (top[:, :, None] == test[start:start + chunk, None, :]).any(-1).float()
        recall.append(hits.sum(1) / test.shape[1])
        ideal = discounts[:min(K, test.shape[1])].sum()
        ndcg.append((hits * discounts).sum(1) / ideal)
    return torch.cat(recall).mean().item(), torch.cat(ndcg).mean().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=1500)
    ap.add_argument("--items", type=int, default=40000)
    ap.add_argument("--fixed", action="store_true", help="topk instead of a full sort")
    args = ap.parse_args()
    users, items, train, test = synthetic_model(args.users, args.items, 32)
    r, n = evaluate(users, items, train, test, args.fixed)
    print(f"recall@{K} {r:.4f}  NDCG@{K} {n:.4f}")


if __name__ == "__main__":
    main()

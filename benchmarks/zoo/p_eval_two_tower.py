"""Offline evaluation of a two-tower retrieval model.

Encodes the item catalogue and a held-out set of queries with the (compiled)
towers, then reports Recall@K / MRR / NDCG@10 of the ground-truth item over the
full catalogue (no sampled negatives).

    python eval_two_tower.py [--items 50000] [--queries 2000]
"""
import argparse
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

N_CATEGORIES, N_BRANDS, N_TAGS, TAGS_PER_ITEM, N_DENSE = 400, 2500, 1000, 4, 16


# --------------------------------------------------------------------------- data
def make_catalogue(n_items, g):
    return {
        "category": torch.randint(0, N_CATEGORIES, (n_items,), generator=g),
        "brand": torch.randint(0, N_BRANDS, (n_items,), generator=g),
        "tags": torch.randint(0, N_TAGS, (n_items, TAGS_PER_ITEM), generator=g),
        "dense": torch.randn(n_items, N_DENSE, generator=g),
    }


def make_queries(items, n_queries, g):
    """Queries are corrupted views of a target item (drop a tag, swap the brand
    with p=0.3, jitter the dense signals)."""
    n_items = items["category"].numel()
    target = torch.randint(0, n_items, (n_queries,), generator=g)
    brand = items["brand"][target].clone()
    swap = torch.rand(n_queries, generator=g) < 0.3
    brand[swap] = torch.randint(0, N_BRANDS, (int(swap.sum()),), generator=g)
    tags = items["tags"][target].clone()
    tags[:, -1] = torch.randint(0, N_TAGS, (n_queries,), generator=g)
    dense = items["dense"][target] + 0.5 * torch.randn(n_queries, N_DENSE, generator=g)
    feats = {"category": items["category"][target], "brand": brand, "tags": tags, "dense": dense}
    return feats, target


def batches(feats, bs):
    n = feats["category"].numel()
    for i in range(0, n, bs):
        yield {k: v[i:i + bs] for k, v in feats.items()}


# -------------------------------------------------------------------------- model
class Tower(nn.Module):
    def __init__(self, dim=64, hidden=256):
        super().__init__()
        self.category = nn.Embedding(N_CATEGORIES, 32)
        self.brand = nn.Embedding(N_BRANDS, 32)
        self.tags = nn.EmbeddingBag(N_TAGS, 32, mode="mean")
        self.dense = nn.Sequential(nn.Linear(N_DENSE, 32), nn.LayerNorm(32))
        self.mlp = nn.Sequential(
            nn.Linear(128, hidden), nn.GELU(),
            nn.Linear(hidden, hidden), nn.GELU(),
            nn.Linear(hidden, dim),
        )

    def forward(self, category, brand, tags, dense):
        x = torch.cat([self.category(category), self.brand(brand),
                       self.tags(tags), self.dense(dense)], dim=-1)
        return F.normalize(self.mlp(x), dim=-1)


class TwoTower(nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.item_tower = Tower(dim)
        self.query_tower = Tower(dim)
        self.log_temperature = nn.Parameter(torch.tensor(math.log(0.05)))

    @classmethod
    def synthetic_checkpoint(cls):
        """Stand-in for torch.load(...): query tower is a perturbed copy of the
        item tower, as after light asymmetric fine-tuning."""
        m = cls()
        with torch.no_grad():
            for pq, pi in zip(m.query_tower.parameters(), m.item_tower.parameters()):
                pq.copy_(pi + 0.05 * pi.std() * torch.randn_like(pi))
        return m.eval()


@torch.inference_mode()
def encode(tower, feats, bs):
    return torch.cat([tower(**b) for b in batches(feats, bs)])


# ------------------------------------------------------------------------ metrics
@torch.inference_mode()
def rank_of_target(query_emb, item_emb, target, chunk=256):
    """1-based rank of each query's ground-truth item among all items."""
    ranks = []
    item_ids = torch.arange(item_emb.size(0))
    for i in range(0, query_emb.size(0), chunk):
        scores = query_emb[i:i + chunk] @ item_emb.T
        tgt = target[i:i + chunk]
        if "--fixed" in sys.argv:
            pos = scores.gather(1, tgt[:, None])
            ahead = (scores > pos) | ((scores == pos) & (item_ids < tgt[:, None]))
            ranks.append(ahead.sum(dim=1) + 1)
            continue
        # stable: ties are broken by item id, so the numbers are reproducible
        order = scores.argsort(dim=1, descending=True, stable=True)  # PLANTED
        ranks.append((order == tgt[:, None]).nonzero()[:, 1] + 1)
    return torch.cat(ranks)


def summarize(ranks, ks=(1, 10, 100)):
    out = {f"recall@{k}": (ranks <= k).float().mean().item() for k in ks}
    out["mrr"] = (1.0 / ranks.float()).mean().item()
    out["ndcg@10"] = torch.where(ranks <= 10, 1.0 / torch.log2(ranks.float() + 1), 0.0).mean().item()
    out["median_rank"] = ranks.median().item()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=2_000)
    ap.add_argument("--batch-size", type=int, default=2_000)
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1234)
    items = make_catalogue(args.items, g)
    queries, target = make_queries(items, args.queries, g)

    model = TwoTower.synthetic_checkpoint()
    item_tower = torch.compile(model.item_tower)
    query_tower = torch.compile(model.query_tower)

    t0 = time.perf_counter()
    item_emb = encode(item_tower, items, args.batch_size)
    query_emb = encode(query_tower, queries, args.batch_size)
    t1 = time.perf_counter()
    ranks = rank_of_target(query_emb, item_emb, target)
    t2 = time.perf_counter()

    print(f"encode: {t1 - t0:.2f}s   rank: {t2 - t1:.2f}s   "
          f"items={item_emb.shape[0]} queries={query_emb.shape[0]}")
    for k, v in summarize(ranks).items():
        print(f"{k:>12s}: {v:.4f}")
    print(f"rank checksum: {int(ranks.sum())}")


if __name__ == "__main__":
    main()

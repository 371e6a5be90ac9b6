"""Offline batch-recommendation job for a two-tower retrieval model.

For every user we encode the interaction history with the user tower, score
the whole catalogue with the item tower, mask items the user has already seen
and keep the top-k. At the end the job reports hit-rate against a held-out
item and catalogue coverage, and writes the recommendations to disk.
"""
import argparse
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class ItemTower(nn.Module):
    def __init__(self, n_items, n_cats, dim):
        super().__init__()
        self.id_emb = nn.Embedding(n_items, dim)
        self.cat_emb = nn.Embedding(n_cats, dim)
        self.mlp = nn.Sequential(nn.Linear(2 * dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, item_ids, item_cats):
        x = torch.cat([self.id_emb(item_ids), self.cat_emb(item_cats)], dim=-1)
        return F.normalize(self.mlp(x), dim=-1)


class UserTower(nn.Module):
    def __init__(self, n_items, dim):
        super().__init__()
        self.hist = nn.EmbeddingBag(n_items, dim, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, flat_items, offsets):
        return F.normalize(self.mlp(self.hist(flat_items, offsets)), dim=-1)


class TwoTower(nn.Module):
    def __init__(self, n_items, n_cats, dim=64):
        super().__init__()
        self.users = UserTower(n_items, dim)
        self.items = ItemTower(n_items, n_cats, dim)
        self.register_buffer("temperature", torch.tensor(0.07))


def synth_catalogue(n_items, n_cats, rng):
    return torch.from_numpy(rng.integers(0, n_cats, n_items))


def synth_histories(n_users, n_items, rng):
    """Zipf-ish popularity; returns list of history arrays and held-out items."""
    pop = 1.0 / np.arange(1, n_items + 1) ** 0.8
    pop /= pop.sum()
    lengths = rng.integers(5, 40, n_users)
    draws = rng.choice(n_items, size=int(lengths.sum()) + n_users, p=pop)
    histories, held_out, pos = [], [], 0
    for n in lengths:
        items = np.unique(draws[pos:pos + n + 1])
        pos += n + 1
        rng.shuffle(items)
        histories.append(items[:-1])
        held_out.append(items[-1])
    return histories, torch.tensor(np.array(held_out))


def pack(histories):
    lens = torch.tensor([len(h) for h in histories])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)[:-1]])
    flat = torch.from_numpy(np.concatenate(histories)).long()
    return flat, offsets, lens


def item_matrix(model, item_cats):
    ids = torch.arange(item_cats.numel())
    return model.items(ids, item_cats)


def recommend(model, histories, item_cats, k, item_vecs=None):
    flat, offsets, lens = pack(histories)
    u = model.users(flat, offsets)
    if item_vecs is None:
        item_vecs = item_matrix(model, item_cats)  # PLANTED
    scores = u @ item_vecs.T / model.temperature
    rows = torch.repeat_interleave(torch.arange(len(histories)), lens)
    scores[rows, flat] = float("-inf")
    return scores.topk(k, dim=1).indices


def run_job(model, histories, held_out, item_cats, k, batch_size, fixed):
    model.eval()
    out = []
    with torch.inference_mode():
        cached = item_matrix(model, item_cats) if fixed else None
        for start in range(0, len(histories), batch_size):
            chunk = histories[start:start + batch_size]
            out.append(recommend(model, chunk, item_cats, k, item_vecs=cached))
    recs = torch.cat(out)
    hits = (recs == held_out[:, None]).any(dim=1).float().mean().item()
    coverage = recs.unique().numel() / item_cats.numel()
    return recs, hits, coverage


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--users", type=int, default=6000)
    ap.add_argument("--items", type=int, default=60000)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=128)
    args = ap.parse_args()

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    item_cats = synth_catalogue(args.items, 300, rng)
    histories, held_out = synth_histories(args.users, args.items, rng)
    model = TwoTower(args.items, 300)

    t0 = time.perf_counter()
    recs, hit_rate, coverage = run_job(model, histories, held_out, item_cats,
                                       args.k, args.batch_size, args.fixed)
    elapsed = time.perf_counter() - t0
    print(f"users={len(histories)} hit@{args.k}={hit_rate:.4f} coverage={coverage:.3f}")

    path = os.path.join(tempfile.gettempdir(), "recs_batch.npy")
    np.save(path, recs.numpy().astype(np.int32))
    print(f"wrote {tuple(recs.shape)} recommendations to {path} in {elapsed:.2f}s")


if __name__ == "__main__":
    main()

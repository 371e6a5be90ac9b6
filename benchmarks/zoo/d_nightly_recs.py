"""Nightly batch job: produce top-K item recommendations for a cohort of users.

Straight-line job built from small library-style helpers:
  load two-tower checkpoint -> embed catalogue -> embed users from their
  histories -> score + mask already-seen items -> top-K -> offline recall -> dump.
"""
import argparse
import json
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

N_ITEMS = 50_000
N_USERS = 1_200
ITEM_FEATS = 48
EMB = 64
TOP_K = 50


class ItemTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(ITEM_FEATS, 256), nn.GELU(), nn.Linear(256, EMB))

    def forward(self, feats):
        return F.normalize(self.mlp(feats), dim=-1)


class UserTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Sequential(nn.Linear(EMB, 128), nn.GELU(), nn.Linear(128, EMB))

    def forward(self, hist_item_emb, offsets):
        pooled = F.embedding_bag(torch.arange(hist_item_emb.shape[0]), hist_item_emb,
                                 offsets, mode="mean")
        return F.normalize(pooled + self.proj(pooled), dim=-1)


def make_checkpoint(path):
    torch.manual_seed(7)
    torch.save({"item": ItemTower().state_dict(), "user": UserTower().state_dict()}, path)


def load_model(path):
    state = torch.load(path, map_location="cpu")
    item, user = ItemTower(), UserTower()
    item.load_state_dict(state["item"])
    user.load_state_dict(state["user"])
    return item.eval(), user.eval()


def synth_catalogue_and_logs(seed=0):
    rng = np.random.default_rng(seed)
    feats = rng.standard_normal((N_ITEMS, ITEM_FEATS)).astype(np.float32)
    lengths = rng.integers(5, 60, size=N_USERS)
    popularity = rng.zipf(1.3, size=lengths.sum()) % N_ITEMS
    history = popularity.astype(np.int64)
    heldout = (rng.zipf(1.3, size=N_USERS) % N_ITEMS).astype(np.int64)
    return torch.from_numpy(feats), torch.from_numpy(history), torch.from_numpy(lengths), \
        torch.from_numpy(heldout)


@torch.no_grad()
def embed_catalogue(item_tower, feats, chunk=8192):
    return torch.cat([item_tower(feats[i:i + chunk]) for i in range(0, len(feats), chunk)])


@torch.no_grad()
def embed_users(user_tower, item_emb, history, lengths):
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
    return user_tower(item_emb[history], offsets)


def seen_mask(history, lengths):
    rows = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    mask = torch.zeros(len(lengths), N_ITEMS, dtype=torch.bool)
    mask[rows, history] = True
    return mask


@torch.no_grad()
def recommend(user_emb, item_emb, mask, k, fixed=False):
    scores = user_emb @ item_emb.T
    scores.masked_fill_(mask, float("-inf"))
    if fixed:
        top_scores, top_idx = torch.topk(scores, k, dim=1)
        return top_idx, top_scores
    order = torch.argsort(scores, dim=1, descending=True)  # PLANTED
    top_idx = order[:, :k]
    return top_idx, scores.gather(1, top_idx)


def recall_at_k(top_idx, heldout):
    return (top_idx == heldout[:, None]).any(1).float().mean().item()


def catalogue_coverage(top_idx):
    return torch.unique(top_idx).numel() / N_ITEMS


def dump(top_idx, top_scores, path):
    with open(path, "w") as f:
        for uid, (items, sc) in enumerate(zip(top_idx.tolist(), top_scores.tolist())):
            f.write(json.dumps({"user": uid, "items": items[:10],
                                "scores": [round(s, 4) for s in sc[:10]]}) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="recs_") as workdir:
        ckpt = os.path.join(workdir, "two_tower.pt")
        make_checkpoint(ckpt)

        item_tower, user_tower = load_model(ckpt)
        feats, history, lengths, heldout = synth_catalogue_and_logs()
        item_emb = embed_catalogue(item_tower, feats)
        user_emb = embed_users(user_tower, item_emb, history, lengths)
        mask = seen_mask(history, lengths)

        top_idx, top_scores = recommend(user_emb, item_emb, mask, TOP_K, fixed=args.fixed)

        out_path = os.path.join(workdir, "recs.jsonl")
        dump(top_idx, top_scores, out_path)
        print(f"users={N_USERS} items={N_ITEMS} k={TOP_K}")
        print(f"recall@{TOP_K}={recall_at_k(top_idx, heldout):.4f} "
              f"coverage={catalogue_coverage(top_idx):.3f}")
        print(f"wrote {out_path} in {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()

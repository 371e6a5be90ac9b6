"""Candidate re-ranking service: given a user's recent product history and a
batch of candidate products, score the candidates with a two-tower model and
return the top-k. A small replay harness drives it with synthetic requests.

usage: python ranking_service.py [--fixed]
"""
import json
import os
import sys
import tempfile
import time

import torch
from torch import nn

FIXED = "--fixed" in sys.argv

ARTIFACT_DIR = os.path.join(tempfile.gettempdir(), "torchneck-zoo-f_ranking_service")  # (zoo: outside the repo)
N_PRODUCTS = 150_000
EMB_DIM = 48


class TwoTower(nn.Module):
    def __init__(self, n_items, dim):
        super().__init__()
        self.history = nn.EmbeddingBag(n_items + 1, dim, mode="mean", padding_idx=0)
        self.items = nn.Embedding(n_items + 1, dim, padding_idx=0)
        self.user_mlp = nn.Sequential(nn.Linear(dim, 128), nn.ReLU(), nn.Linear(128, dim))
        self.item_mlp = nn.Sequential(nn.Linear(dim, 128), nn.ReLU(), nn.Linear(128, dim))

    def forward(self, hist_ids, hist_offsets, cand_ids):
        u = self.user_mlp(self.history(hist_ids, hist_offsets))      # (B, d)
        v = self.item_mlp(self.items(cand_ids))                      # (B, C, d)
        return torch.einsum("bd,bcd->bc", u, v)


def build_artifacts(path):
    """Stand-in for the offline export job: vocabulary + model weights."""
    os.makedirs(path, exist_ok=True)
    tokens = [f"sku-{i:06d}-{(i * 7919) % 9973:04d}" for i in range(N_PRODUCTS)]
    with open(os.path.join(path, "vocab.json"), "w") as f:
        json.dump({"version": 3, "tokens": tokens}, f)
    torch.manual_seed(0)
    torch.save(TwoTower(N_PRODUCTS, EMB_DIM).state_dict(), os.path.join(path, "model.pt"))


def load_vocab(vocab_path):
    with open(vocab_path) as f:
        tokens = json.load(f)["tokens"]
    # id 0 is reserved for padding / unknown products
    return {tok: i + 1 for i, tok in enumerate(tokens)}, ["<unk>"] + tokens


class RankingService:
    def __init__(self, artifact_dir, top_k=10):
        self.vocab_path = os.path.join(artifact_dir, "vocab.json")
        self.top_k = top_k
        self.model = TwoTower(N_PRODUCTS, EMB_DIM)
        self.model.load_state_dict(torch.load(os.path.join(artifact_dir, "model.pt")))
        self.model.eval()
        self._vocab = load_vocab(self.vocab_path)
        self.stats = {"requests": 0, "unknown_tokens": 0, "latency_ms": []}

    def _lookup_tables(self):
        if FIXED:
            return self._vocab
        return load_vocab(self.vocab_path)  # PLANTED

    def _encode(self, requests):
        tok2id, _ = self._lookup_tables()
        hist_ids, offsets, cands = [], [], []
        max_c = max(len(r["candidates"]) for r in requests)
        for r in requests:
            offsets.append(len(hist_ids))
            ids = [tok2id.get(t, 0) for t in r["history"]]
            self.stats["unknown_tokens"] += ids.count(0)
            hist_ids.extend(ids)
            c = [tok2id.get(t, 0) for t in r["candidates"]]
            cands.append(c + [0] * (max_c - len(c)))
        return (torch.tensor(hist_ids), torch.tensor(offsets), torch.tensor(cands))

    @torch.inference_mode()
    def handle(self, requests):
        t0 = time.perf_counter()
        hist, offs, cands = self._encode(requests)
        scores = self.model(hist, offs, cands)
        scores = scores.masked_fill(cands == 0, float("-inf"))
        top = scores.topk(self.top_k, dim=1)
        _, id2tok = self._lookup_tables()
        out = [[{"sku": id2tok[i], "score": round(s, 4)}
                for i, s in zip(ids, vals)]
               for ids, vals in zip(cands.gather(1, top.indices).tolist(), top.values.tolist())]
        self.stats["requests"] += len(requests)
        self.stats["latency_ms"].append(1000 * (time.perf_counter() - t0))
        return out


def synthetic_traffic(n_batches, batch_size, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n_batches):
        batch = []
        for _ in range(batch_size):
            h = torch.randint(0, N_PRODUCTS + 500, (int(torch.randint(5, 40, (1,), generator=g)),),
                              generator=g).tolist()
            c = torch.randint(0, N_PRODUCTS, (int(torch.randint(50, 200, (1,), generator=g)),),
                              generator=g).tolist()
            batch.append({"history": [f"sku-{i:06d}-{(i * 7919) % 9973:04d}" for i in h],
                          "candidates": [f"sku-{i:06d}-{(i * 7919) % 9973:04d}" for i in c]})
        yield batch


def main():
    build_artifacts(ARTIFACT_DIR)
    service = RankingService(ARTIFACT_DIR, top_k=10)
    checksum = 0.0
    t0 = time.perf_counter()
    for batch in synthetic_traffic(n_batches=60, batch_size=16):
        results = service.handle(batch)
        checksum += sum(item["score"] for res in results for item in res)
    lat = sorted(service.stats["latency_ms"])
    print(f"served {service.stats['requests']} requests in {time.perf_counter() - t0:.2f}s, "
          f"unknown tokens {service.stats['unknown_tokens']}")
    print(f"latency p50={lat[len(lat) // 2]:.1f}ms p95={lat[int(0.95 * len(lat))]:.1f}ms")
    print(f"example top-3: {results[0][:3]}")
    print(f"score checksum {checksum:.3f}")


if __name__ == "__main__":
    main()

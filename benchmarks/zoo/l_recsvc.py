"""Product-search recommendation service (CPU inference).

A small two-tower retrieval model answers free-text search requests that
arrive from a request stream.  Each request is tokenized with a hashing
tokenizer, encoded by the query tower (EmbeddingBag + MLP), scored against
the item embeddings of the whole catalog, and the top hits are filtered
(items the user has already bought are dropped) and formatted as a response.

Planted problem: the service runs the item tower over the entire catalog
inside ``handle()``, i.e. once per request, although the catalog and the
model weights never change while the service is up.  That full-catalog
MLP pass dwarfs everything else a request does.

Fix (``--fixed``): the catalog embeddings are computed once when the
service starts and reused for every request.  The answers are identical.
"""
import sys
import time
import zlib
import re
from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = "--fixed" in sys.argv

VOCAB = 30_000
EMB = 128
ITEM_FEATS = 96
N_ITEMS = 10_000
N_REQUESTS = 240
TOP_K = 10

WORDS = ("red blue green black white leather cotton wool running hiking "
         "shoe boot jacket shirt dress sock hat glove bag watch phone case "
         "cable charger lamp desk chair table mug kettle pan knife spoon "
         "organic vegan small large kids men women sport casual formal "
         "waterproof wireless portable vintage modern classic cheap premium").split()


class HashTokenizer:
    _split = re.compile(r"[a-z0-9]+")

    def __init__(self, vocab_size, max_ngram=2):
        self.vocab_size = vocab_size
        self.max_ngram = max_ngram

    def _hash(self, tok):
        return 1 + zlib.crc32(tok.encode()) % (self.vocab_size - 1)

    def __call__(self, text):
        toks = self._split.findall(text.lower())
        ids = [self._hash(t) for t in toks]
        if self.max_ngram >= 2:
            ids += [self._hash(a + "_" + b) for a, b in zip(toks, toks[1:])]
        return ids or [0]


class QueryTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(VOCAB, EMB, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(EMB, 256), nn.ReLU(), nn.Linear(256, EMB))

    def forward(self, ids, offsets):
        return F.normalize(self.mlp(self.bag(ids, offsets)), dim=-1)


class ItemTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(ITEM_FEATS, 512), nn.ReLU(),
            nn.Linear(512, 256), nn.ReLU(),
            nn.Linear(256, EMB),
        )

    def forward(self, feats):
        return F.normalize(self.mlp(feats), dim=-1)


class Catalog:
    def __init__(self, n_items, seed=0):
        rng = np.random.default_rng(seed)
        self.features = torch.from_numpy(
            rng.standard_normal((n_items, ITEM_FEATS)).astype(np.float32))
        self.titles = [" ".join(rng.choice(WORDS, size=3)) for _ in range(n_items)]
        self.prices = rng.uniform(2.0, 300.0, size=n_items).round(2)


class RecommendationService:
    def __init__(self, catalog, query_tower, item_tower, top_k=TOP_K):
        self.catalog = catalog
        self.tokenizer = HashTokenizer(VOCAB)
        self.query_tower = query_tower.eval()
        self.item_tower = item_tower.eval()
        self.top_k = top_k
        self.item_matrix = self._encode_catalog() if FIXED else None
        self.latencies = deque(maxlen=1000)

    def _encode_catalog(self):
        return self.item_tower(self.catalog.features)

    def _preprocess(self, text):
        ids = self.tokenizer(text)
        return torch.tensor(ids, dtype=torch.long), torch.tensor([0])

    def _postprocess(self, scores, idx, exclude):
        out = []
        for s, i in zip(scores.tolist(), idx.tolist()):
            if i in exclude:
                continue
            out.append({"item": i, "title": self.catalog.titles[i],
                        "price": float(self.catalog.prices[i]), "score": round(s, 5)})
            if len(out) == self.top_k:
                break
        return out

    @torch.inference_mode()
    def handle(self, request):
        t0 = time.perf_counter()
        ids, offsets = self._preprocess(request["query"])
        q = self.query_tower(ids, offsets)[0]
        if FIXED:
            items = self.item_matrix
        else:
            items = self._encode_catalog()  # PLANTED: whole catalog re-encoded by the item tower on every request
        scores = items @ q
        top_s, top_i = torch.topk(scores, self.top_k + len(request["purchased"]))
        resp = {"request_id": request["id"],
                "results": self._postprocess(top_s, top_i, set(request["purchased"]))}
        self.latencies.append(time.perf_counter() - t0)
        return resp


def request_stream(n, n_items, seed=1):
    rng = np.random.default_rng(seed)
    for rid in range(n):
        words = rng.choice(WORDS, size=int(rng.integers(2, 7)))
        purchased = rng.integers(0, n_items, size=int(rng.integers(0, 5))).tolist()
        yield {"id": rid, "query": " ".join(words), "purchased": purchased}


def main():
    torch.manual_seed(0)
    catalog = Catalog(N_ITEMS)
    service = RecommendationService(catalog, QueryTower(), ItemTower())

    checksum = 0.0
    n_results = 0
    t0 = time.perf_counter()
    for req in request_stream(N_REQUESTS, N_ITEMS):
        resp = service.handle(req)
        for rank, r in enumerate(resp["results"]):
            checksum += (rank + 1) * r["item"] * 1e-6 + r["score"]
            n_results += 1
    wall = time.perf_counter() - t0

    lat = np.array(service.latencies) * 1e3
    print(f"served {N_REQUESTS} requests in {wall:.2f}s "
          f"(p50 {np.percentile(lat, 50):.2f} ms, p99 {np.percentile(lat, 99):.2f} ms)")
    print(f"results returned: {n_results}")
    print(f"checksum: {checksum:.4f}")


if __name__ == "__main__":
    main()

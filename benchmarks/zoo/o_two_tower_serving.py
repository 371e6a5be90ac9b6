"""In-process simulation of a two-tower retrieval service.

A synthetic catalogue of items (id, category, a few dense features) and a
stream of user requests (user id + recent interaction history) are generated.
A two-tower model maps users and items into a shared embedding space; the
service answers each request with the top-k items by dot product, excluding
items the user has already interacted with.  A tiny LRU cache short-circuits
repeated identical requests.
"""
import argparse
import time
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Request:
    request_id: int
    user_id: int
    history: tuple  # recent item ids, most recent last
    k: int = 20


class ItemTower(nn.Module):
    def __init__(self, n_items, n_categories, n_dense, dim):
        super().__init__()
        self.id_emb = nn.Embedding(n_items, dim)
        self.cat_emb = nn.Embedding(n_categories, dim // 2)
        self.mlp = nn.Sequential(
            nn.Linear(dim + dim // 2 + n_dense, 128),
            nn.ReLU(),
            nn.Linear(128, 128),
            nn.ReLU(),
            nn.Linear(128, dim),
        )

    def forward(self, item_ids, categories, dense):
        x = torch.cat([self.id_emb(item_ids), self.cat_emb(categories), dense], dim=-1)
        return F.normalize(self.mlp(x), dim=-1)


class UserTower(nn.Module):
    def __init__(self, n_users, n_items, dim):
        super().__init__()
        self.user_emb = nn.Embedding(n_users, dim)
        self.hist_emb = nn.EmbeddingBag(n_items, dim, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(2 * dim, 256), nn.ReLU(), nn.Linear(256, dim))

    def forward(self, user_ids, hist_flat, hist_offsets):
        h = self.hist_emb(hist_flat, hist_offsets)
        x = torch.cat([self.user_emb(user_ids), h], dim=-1)
        return F.normalize(self.mlp(x), dim=-1)


class TwoTower(nn.Module):
    def __init__(self, n_users, n_items, n_categories, n_dense, dim=64):
        super().__init__()
        self.user_tower = UserTower(n_users, n_items, dim)
        self.item_tower = ItemTower(n_items, n_categories, n_dense, dim)


class Catalogue:
    def __init__(self, n_items, n_categories, n_dense, gen):
        self.item_ids = torch.arange(n_items)
        self.categories = torch.randint(0, n_categories, (n_items,), generator=gen)
        self.dense = torch.randn(n_items, n_dense, generator=gen)
        # popularity prior used as a small additive score bias
        self.log_pop = torch.log1p(torch.rand(n_items, generator=gen) * 100.0) * 0.01

    def __len__(self):
        return self.item_ids.numel()


class RecommendationService:
    def __init__(self, model, catalogue, cache_size=256, precompute_items=False):
        self.model = model.eval()
        self.catalogue = catalogue
        self.cache = OrderedDict()
        self.cache_size = cache_size
        self.precompute_items = precompute_items
        self._item_vecs = None
        self.stats = {"hits": 0, "misses": 0}
        if precompute_items:
            self._item_vecs = self._compute_item_vectors()

    @torch.inference_mode()
    def _compute_item_vectors(self):
        c = self.catalogue
        return self.model.item_tower(c.item_ids, c.categories, c.dense)

    def _item_vectors(self):
        if self.precompute_items:
            return self._item_vecs
        # catalogue features can be refreshed by the feed, so embed items on demand
        return self._compute_item_vectors()  # PLANTED

    def _cache_get(self, key):
        if key in self.cache:
            self.cache.move_to_end(key)
            self.stats["hits"] += 1
            return self.cache[key]
        self.stats["misses"] += 1
        return None

    def _cache_put(self, key, value):
        self.cache[key] = value
        if len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)

    @torch.inference_mode()
    def handle(self, request: Request):
        key = (request.user_id, request.history, request.k)
        cached = self._cache_get(key)
        if cached is not None:
            return cached

        hist = torch.tensor(request.history, dtype=torch.long)
        user_vec = self.model.user_tower(
            torch.tensor([request.user_id]), hist, torch.tensor([0])
        )[0]

        item_vecs = self._item_vectors()
        scores = item_vecs @ user_vec + self.catalogue.log_pop
        scores[hist] = float("-inf")  # never recommend already-seen items
        top_scores, top_items = torch.topk(scores, request.k)

        response = {
            "request_id": request.request_id,
            "items": top_items.tolist(),
            "scores": top_scores.tolist(),
        }
        self._cache_put(key, response)
        return response


def make_requests(n_requests, n_users, n_items, gen, repeat_frac=0.1):
    requests = []
    for rid in range(n_requests):
        if requests and torch.rand((), generator=gen).item() < repeat_frac:
            prev = requests[int(torch.randint(0, len(requests), (), generator=gen))]
            requests.append(Request(rid, prev.user_id, prev.history, prev.k))
            continue
        user = int(torch.randint(0, n_users, (), generator=gen))
        hlen = int(torch.randint(5, 50, (), generator=gen))
        history = tuple(torch.randint(0, n_items, (hlen,), generator=gen).tolist())
        requests.append(Request(rid, user, history, k=20))
    return requests


def recall_against_reference(responses, reference):
    hits = total = 0
    for r in responses:
        ref = reference.get(r["request_id"])
        if ref is None:
            continue
        hits += len(set(r["items"]) & ref)
        total += len(ref)
    return hits / max(total, 1)


def main():
    parser = argparse.ArgumentParser(description="two-tower retrieval service simulation")
    parser.add_argument("--n-items", type=int, default=20_000)
    parser.add_argument("--n-users", type=int, default=20_000)
    parser.add_argument("--n-categories", type=int, default=300)
    parser.add_argument("--n-dense", type=int, default=16)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--requests", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fixed", action="store_true",
                        help="use the corrected code path")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)

    model = TwoTower(args.n_users, args.n_items, args.n_categories, args.n_dense, args.dim)
    catalogue = Catalogue(args.n_items, args.n_categories, args.n_dense, gen)
    requests = make_requests(args.requests, args.n_users, args.n_items, gen)

    service = RecommendationService(model, catalogue, precompute_items=args.fixed)

    t0 = time.perf_counter()
    latencies = []
    responses = []
    for req in requests:
        ts = time.perf_counter()
        responses.append(service.handle(req))
        latencies.append(time.perf_counter() - ts)
    elapsed = time.perf_counter() - t0

    # a "reference" slate per request: the popularity-only top-20, used as a
    # cheap sanity metric (how much the model agrees with the popularity prior)
    pop_top = set(torch.topk(catalogue.log_pop, 20).indices.tolist())
    reference = {r.request_id: pop_top for r in requests}
    recall = recall_against_reference(responses, reference)

    checksum = sum(sum(r["items"]) for r in responses)
    score_sum = sum(sum(r["scores"]) for r in responses)
    lat = sorted(latencies)
    print(f"served {len(responses)} requests in {elapsed:.2f}s "
          f"(p50 {lat[len(lat) // 2] * 1e3:.1f} ms, p95 {lat[int(len(lat) * 0.95)] * 1e3:.1f} ms)")
    print(f"cache hits={service.stats['hits']} misses={service.stats['misses']}")
    print(f"popularity overlap={recall:.4f}")
    print(f"checksum items={checksum} scores={score_sum:.4f}")


if __name__ == "__main__":
    main()

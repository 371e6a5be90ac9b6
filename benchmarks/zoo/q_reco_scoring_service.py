"""Candidate re-ranking service for a two-tower recommender.

A worker thread owns the model and serves requests from a bounded queue,
micro-batching whatever is waiting (up to MAX_BATCH). The main thread plays
the role of the front end: it submits requests in bursts and collects the
answers through per-request futures.
"""
import argparse
import queue
import threading
import time
from concurrent.futures import Future

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

N_ITEMS = 200_000
EMB_DIM = 64
USER_FEATS = 24
MAX_HIST = 50
N_CAND = 200
TOP_K = 10
MAX_BATCH = 32
PAD = 0


class TwoTower(nn.Module):
    def __init__(self, n_items, dim, user_feats, fixed=False):
        super().__init__()
        self.item_emb = nn.Embedding(n_items, dim, padding_idx=PAD)
        self.user_mlp = nn.Sequential(
            nn.Linear(dim + user_feats, 256), nn.ReLU(),
            nn.Linear(256, dim),
        )
        self.item_proj = nn.Linear(dim, dim)
        self.fixed = fixed

    def pool_history(self, hist_ids, hist_len):
        """Mean of the embeddings of the items in each user's history."""
        if self.fixed:
            summed = F.embedding_bag(hist_ids, self.item_emb.weight, mode="sum",
                                     padding_idx=PAD)
            return summed / hist_len.clamp(min=1).unsqueeze(1)
        # multi-hot bag of items (repeat views count twice), padding dropped
        bag = torch.zeros(hist_ids.size(0), self.item_emb.num_embeddings)
        bag.scatter_add_(1, hist_ids, torch.ones_like(hist_ids, dtype=bag.dtype))
        bag[:, PAD] = 0
        return (bag @ self.item_emb.weight) / hist_len.clamp(min=1).unsqueeze(1)  # PLANTED

    def forward(self, hist_ids, hist_len, user_x, cand_ids):
        pooled = self.pool_history(hist_ids, hist_len)
        u = self.user_mlp(torch.cat([pooled, user_x], 1))
        u = F.normalize(u, dim=1)
        c = F.normalize(self.item_proj(self.item_emb(cand_ids)), dim=-1)
        return torch.einsum("bd,bkd->bk", u, c)


# ------------------------------------------------------------------ requests
def make_request(rng, req_id):
    n_hist = int(rng.integers(5, MAX_HIST + 1))
    # popularity-skewed history
    hist = np.minimum(rng.zipf(1.3, n_hist), N_ITEMS - 1).astype(np.int64)
    cands = rng.integers(1, N_ITEMS, N_CAND).astype(np.int64)
    return {
        "id": req_id,
        "history": hist,
        "user_x": rng.normal(0, 1, USER_FEATS).astype(np.float32),
        "candidates": cands,
    }


def collate(reqs):
    b = len(reqs)
    hist = torch.full((b, MAX_HIST), PAD, dtype=torch.long)
    hist_len = torch.zeros(b)
    for i, r in enumerate(reqs):
        h = torch.from_numpy(r["history"])
        hist[i, : len(h)] = h
        hist_len[i] = len(h)
    user_x = torch.from_numpy(np.stack([r["user_x"] for r in reqs]))
    cands = torch.from_numpy(np.stack([r["candidates"] for r in reqs]))
    return hist, hist_len, user_x, cands


# -------------------------------------------------------------------- worker
def worker_loop(model, req_q, stats):
    stop = False
    while not stop:
        item = req_q.get()
        if item is None:
            break
        pending = [item]
        while len(pending) < MAX_BATCH:
            try:
                nxt = req_q.get_nowait()
            except queue.Empty:
                break
            if nxt is None:
                stop = True
                break
            pending.append(nxt)

        reqs = [p[0] for p in pending]
        t0 = time.perf_counter()
        try:
            hist, hist_len, user_x, cands = collate(reqs)
            with torch.inference_mode():
                scores = model(hist, hist_len, user_x, cands)
                top_s, top_i = scores.topk(TOP_K, dim=1)
                top_items = cands.gather(1, top_i)
            for (req, fut), s, it in zip(pending, top_s, top_items):
                fut.set_result({"id": req["id"], "items": it.numpy(), "scores": s.numpy()})
        except Exception as exc:  # propagate to callers, keep serving
            for _, fut in pending:
                fut.set_exception(exc)
        stats["batches"] += 1
        stats["batch_sizes"].append(len(pending))
        stats["compute_s"] += time.perf_counter() - t0


# ---------------------------------------------------------------- front end
def submit(req_q, req):
    fut = Future()
    req_q.put((req, fut))
    return fut


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=8000)
    ap.add_argument("--burst", type=int, default=48)
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(0)
    rng = np.random.default_rng(1234)
    model = TwoTower(N_ITEMS, EMB_DIM, USER_FEATS, fixed=args.fixed).eval()

    req_q = queue.Queue(maxsize=256)
    stats = {"batches": 0, "batch_sizes": [], "compute_s": 0.0}
    worker = threading.Thread(target=worker_loop, args=(model, req_q, stats), daemon=True)
    worker.start()

    t0 = time.perf_counter()
    results, latencies = {}, []
    next_id = 0
    while next_id < args.requests:
        n = min(args.burst, args.requests - next_id)
        sent = []
        for _ in range(n):
            req = make_request(rng, next_id)
            sent.append((time.perf_counter(), submit(req_q, req)))
            next_id += 1
        for ts, fut in sent:
            out = fut.result(timeout=60)
            latencies.append(time.perf_counter() - ts)
            results[out["id"]] = out
    req_q.put(None)
    worker.join()
    wall = time.perf_counter() - t0

    ids = np.stack([results[i]["items"] for i in range(args.requests)])
    scores = np.stack([results[i]["scores"] for i in range(args.requests)])
    lat = np.array(latencies) * 1e3
    print(f"served {args.requests} requests in {stats['batches']} batches "
          f"(mean batch {np.mean(stats['batch_sizes']):.1f})")
    print(f"latency p50 {np.percentile(lat, 50):.1f} ms  p99 {np.percentile(lat, 99):.1f} ms  "
          f"throughput {args.requests / wall:.0f} req/s")
    print(f"checksum items {int(ids.sum() % 1_000_003)}  scores {scores.sum():.3f}")


if __name__ == "__main__":
    main()

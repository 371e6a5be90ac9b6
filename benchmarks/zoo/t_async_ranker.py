"""Async candidate-ranking microservice (simulation).

Clients send ranking requests (user id, recent interaction history, a few
context features and a list of candidate item ids).  A micro-batcher collects
requests from an asyncio.Queue until the batch is full or a short deadline
passes, scores every candidate with a two-tower ranker and resolves each
request's future with its top-k items.  main() replays a fixed, seeded
request trace and reports throughput and latency percentiles.
"""
import argparse
import asyncio
import dataclasses
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass
class ServiceConfig:
    max_batch: int = 64
    max_wait_ms: float = 2.0
    top_k: int = 10
    pointwise_layout: bool = True


@dataclasses.dataclass
class RankRequest:
    request_id: int
    user_id: int
    history: np.ndarray      # (hist_len,) item ids, 0 = padding
    context: np.ndarray      # (n_context,) float32
    candidates: np.ndarray   # (n_cand,) item ids


@dataclasses.dataclass
class RankResponse:
    request_id: int
    item_ids: list
    scores: list


class MLP(nn.Sequential):
    def __init__(self, dims):
        layers = []
        for i, (d_in, d_out) in enumerate(zip(dims[:-1], dims[1:])):
            layers.append(nn.Linear(d_in, d_out))
            if i < len(dims) - 2:
                layers += [nn.LayerNorm(d_out), nn.GELU()]
        super().__init__(*layers)


class TwoTowerRanker(nn.Module):
    def __init__(self, n_users, n_items, n_context, n_item_feats, dim=64, hidden=512):
        super().__init__()
        self.user_emb = nn.Embedding(n_users, dim)
        self.hist_pool = nn.EmbeddingBag(n_items, dim, mode="mean", padding_idx=0)
        self.user_tower = MLP([2 * dim + n_context, hidden, hidden // 2, dim])
        self.item_emb = nn.Embedding(n_items, dim, padding_idx=0)
        self.item_tower = MLP([dim + n_item_feats, 2 * dim, dim])
        self.item_bias = nn.Embedding(n_items, 1)
        self.log_temp = nn.Parameter(torch.tensor(-1.5))
        self.register_buffer("item_vecs", torch.zeros(n_items, dim), persistent=False)

    def encode_items(self, item_feats, chunk=8192):
        ids = torch.arange(item_feats.shape[0])
        out = []
        for s in range(0, len(ids), chunk):
            x = torch.cat([self.item_emb(ids[s:s + chunk]), item_feats[s:s + chunk]], dim=1)
            out.append(F.normalize(self.item_tower(x), dim=-1))
        return torch.cat(out)

    def refresh_item_cache(self, item_feats):
        self.item_vecs.copy_(self.encode_items(item_feats))

    def encode_users(self, user_ids, history, context):
        x = torch.cat([self.user_emb(user_ids), self.hist_pool(history), context], dim=1)
        return F.normalize(self.user_tower(x), dim=-1)

    def forward(self, user_ids, history, context, cand_ids, row_of):
        """Scores each candidate against the user row it belongs to (row_of)."""
        u = self.encode_users(user_ids, history, context)
        v = self.item_vecs[cand_ids]
        logits = (u[row_of] * v).sum(-1) / self.log_temp.exp()
        return logits + self.item_bias(cand_ids).squeeze(-1)


class RankingService:
    def __init__(self, model, cfg: ServiceConfig):
        self.model = model.eval()
        self.cfg = cfg
        self.queue: asyncio.Queue = asyncio.Queue()
        self.batch_sizes = []
        self._worker = None

    async def start(self):
        self._worker = asyncio.create_task(self._batch_loop())

    async def stop(self):
        await self.queue.put(None)
        await self._worker

    async def rank(self, req: RankRequest) -> RankResponse:
        fut = asyncio.get_running_loop().create_future()
        await self.queue.put((req, fut))
        return await fut

    async def _batch_loop(self):
        loop = asyncio.get_running_loop()
        max_wait = self.cfg.max_wait_ms / 1000.0
        while True:
            first = await self.queue.get()
            if first is None:
                return
            batch = [first]
            deadline = loop.time() + max_wait
            while len(batch) < self.cfg.max_batch:
                try:
                    item = self.queue.get_nowait()
                except asyncio.QueueEmpty:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    try:
                        item = await asyncio.wait_for(self.queue.get(), remaining)
                    except asyncio.TimeoutError:
                        break
                if item is None:
                    self.queue.put_nowait(None)
                    break
                batch.append(item)
            self.batch_sizes.append(len(batch))
            self._run_batch(batch)
            await asyncio.sleep(0)

    def _collate(self, reqs):
        counts = torch.tensor([len(r.candidates) for r in reqs])
        user_ids = torch.tensor([r.user_id for r in reqs])
        history = torch.from_numpy(np.stack([r.history for r in reqs]))
        context = torch.from_numpy(np.stack([r.context for r in reqs]))
        cand_ids = torch.from_numpy(np.concatenate([r.candidates for r in reqs]))
        row_of = torch.repeat_interleave(torch.arange(len(reqs)), counts)
        if self.cfg.pointwise_layout:
            # one row per (request, candidate) pair, as in the training logs
            user_ids, history, context = user_ids[row_of], history[row_of], context[row_of]  # PLANTED
            row_of = torch.arange(len(cand_ids))
        return (user_ids, history, context, cand_ids, row_of), counts

    def _run_batch(self, batch):
        reqs = [r for r, _ in batch]
        inputs, counts = self._collate(reqs)
        with torch.inference_mode():
            scores = self.model(*inputs)
            cand_ids = inputs[3]
            responses = []
            for req, s, ids in zip(reqs, scores.split(counts.tolist()), cand_ids.split(counts.tolist())):
                top = s.topk(min(self.cfg.top_k, len(s)))
                responses.append(RankResponse(req.request_id, ids[top.indices].tolist(),
                                              top.values.tolist()))
        for (_, fut), resp in zip(batch, responses):
            if not fut.done():
                fut.set_result(resp)


def make_catalog(n_items, n_item_feats, seed):
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(n_items, n_item_feats, generator=g)
    feats[:, 0] = torch.rand(n_items, generator=g).log1p()     # popularity-like
    return feats


def make_trace(n_requests, n_users, n_items, hist_len, n_context, cand_range, seed):
    rng = np.random.default_rng(seed)
    trace = []
    for rid in range(n_requests):
        n_hist = int(rng.integers(5, hist_len + 1))
        hist = np.zeros(hist_len, dtype=np.int64)
        hist[:n_hist] = rng.integers(1, n_items, size=n_hist)
        n_cand = int(rng.integers(cand_range[0], cand_range[1] + 1))
        cands = rng.choice(n_items - 1, size=n_cand, replace=False) + 1
        ctx = rng.standard_normal(n_context).astype(np.float32)
        trace.append(RankRequest(rid, int(rng.integers(n_users)), hist, ctx, cands.astype(np.int64)))
    return trace


async def client(service, requests, latencies, results):
    loop = asyncio.get_running_loop()
    for req in requests:
        t0 = loop.time()
        resp = await service.rank(req)
        latencies.append(loop.time() - t0)
        results[req.request_id] = resp


async def run(args):
    torch.manual_seed(args.seed)
    model = TwoTowerRanker(args.users, args.items, args.context, args.item_feats,
                           dim=args.dim, hidden=args.hidden)
    with torch.inference_mode():
        model.refresh_item_cache(make_catalog(args.items, args.item_feats, args.seed))
    trace = make_trace(args.requests, args.users, args.items, args.hist_len, args.context,
                       (args.min_cands, args.max_cands), args.seed)

    cfg = ServiceConfig(max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                        top_k=args.top_k, pointwise_layout=not args.fixed)
    service = RankingService(model, cfg)
    await service.start()

    latencies, results = [], {}
    shards = [trace[i::args.clients] for i in range(args.clients)]
    t0 = time.perf_counter()
    await asyncio.gather(*(client(service, shard, latencies, results) for shard in shards))
    wall = time.perf_counter() - t0
    await service.stop()

    lat_ms = np.array(latencies) * 1000.0
    top1 = np.array([results[i].scores[0] for i in range(len(trace))])
    topk_ids = np.array([results[i].item_ids for i in range(len(trace))])
    n_cands = sum(len(r.candidates) for r in trace)
    print(f"served {len(results)} requests ({n_cands} candidates) from {args.clients} clients "
          f"in {wall:.2f}s -> {len(results) / wall:.1f} req/s, {n_cands / wall:.0f} cand/s")
    print(f"batches: {len(service.batch_sizes)}, mean size {np.mean(service.batch_sizes):.1f}")
    print("latency ms: p50 {:.2f}  p90 {:.2f}  p99 {:.2f}  max {:.2f}".format(
        *np.percentile(lat_ms, [50, 90, 99]), lat_ms.max()))
    print(f"mean top-1 score {top1.mean():.5f}, mean top-{args.top_k} id {topk_ids.mean():.2f}, "
          f"top-1 checksum {int(topk_ids[:, 0].sum()) % 1000003}")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=896)
    p.add_argument("--clients", type=int, default=128)
    p.add_argument("--users", type=int, default=50_000)
    p.add_argument("--items", type=int, default=20_000)
    p.add_argument("--hist-len", type=int, default=50)
    p.add_argument("--context", type=int, default=16)
    p.add_argument("--item-feats", type=int, default=24)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--min-cands", type=int, default=200)
    p.add_argument("--max-cands", type=int, default=400)
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--max-wait-ms", type=float, default=2.0)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--fixed", action="store_true")
    return p.parse_args()


def main():
    args = parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()

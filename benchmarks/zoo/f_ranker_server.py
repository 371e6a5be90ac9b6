"""Toy re-ranking service: a queue of scoring requests served by a small MLP ranker.

The checkpoint is written once at start-up (standing in for the artefact the
training job publishes), then a worker drains a request queue in FIFO order.
"""
import argparse
import collections
import os
import tempfile
import time

import torch
import torch.nn as nn


class Ranker(nn.Module):
    def __init__(self, d_in=256, d_hidden=2048, n_layers=4):
        super().__init__()
        layers = [nn.Linear(d_in, d_hidden), nn.GELU()]
        for _ in range(n_layers - 1):
            layers += [nn.Linear(d_hidden, d_hidden), nn.GELU()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(d_hidden, 1)

    def forward(self, query, docs):
        # query: [d_in], docs: [n_docs, d_in]
        x = docs * query.unsqueeze(0)
        return self.head(self.body(x)).squeeze(-1)


Request = collections.namedtuple("Request", "req_id query docs k")


class RankingServer:
    def __init__(self, ckpt_path, fixed=False):
        self.ckpt_path = ckpt_path
        self.fixed = fixed
        self.model = None
        self.queue = collections.deque()
        self.latencies = []
        if fixed:
            self.model = self._load_model()

    def _load_model(self):
        model = Ranker()
        state = torch.load(self.ckpt_path, map_location="cpu")
        model.load_state_dict(state)
        model.eval()
        return model

    def submit(self, req):
        self.queue.append(req)

    def _get_model(self):
        if self.fixed:
            return self.model
        # always serve whatever checkpoint is currently published
        return self._load_model()  # PLANTED

    @torch.no_grad()
    def handle(self, req):
        model = self._get_model()
        scores = model(req.query, req.docs)
        top = torch.topk(scores, req.k)
        return {"req_id": req.req_id,
                "doc_ids": top.indices.tolist(),
                "scores": [round(s, 4) for s in top.values.tolist()]}

    def serve_forever(self):
        responses = []
        while self.queue:
            req = self.queue.popleft()
            t0 = time.perf_counter()
            responses.append(self.handle(req))
            self.latencies.append(time.perf_counter() - t0)
        return responses


def make_requests(n, d_in=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    reqs = []
    for i in range(n):
        n_docs = int(torch.randint(16, 48, (1,), generator=g))
        reqs.append(Request(i, torch.randn(d_in, generator=g),
                            torch.randn(n_docs, d_in, generator=g), 5))
    return reqs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--requests", type=int, default=60)
    args = ap.parse_args()
    torch.manual_seed(0)

    with tempfile.TemporaryDirectory() as tmp:
        ckpt = os.path.join(tmp, "ranker.pt")
        torch.save(Ranker().state_dict(), ckpt)

        server = RankingServer(ckpt, fixed=args.fixed)
        for req in make_requests(args.requests):
            server.submit(req)
        t0 = time.perf_counter()
        responses = server.serve_forever()
        elapsed = time.perf_counter() - t0

    lat = sorted(server.latencies)
    checksum = sum(sum(r["scores"]) for r in responses)
    print(f"served {len(responses)} requests in {elapsed:.2f}s "
          f"p50={lat[len(lat) // 2] * 1e3:.1f}ms p99={lat[int(len(lat) * 0.99)] * 1e3:.1f}ms")
    print(f"first response: {responses[0]}")
    print(f"score checksum: {checksum:.4f}")


if __name__ == "__main__":
    main()

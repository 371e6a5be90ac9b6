"""Toy text-embedding inference server: requests arrive on a queue, a worker drains
it in micro-batches, runs the scoring model and posts replies."""
import argparse
import queue
import threading
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn

VOCAB = 5000
FEAT = 256


@dataclass
class Request:
    rid: int
    token_ids: list
    reply: "queue.Queue" = field(repr=False, default=None)


class BagOfWordsScorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.EmbeddingBag(VOCAB, FEAT, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(FEAT, 256), nn.LayerNorm(256), nn.GELU(),
                                 nn.Linear(256, 256), nn.LayerNorm(256), nn.GELU(),
                                 nn.Linear(256, 128), nn.LayerNorm(128), nn.GELU(),
                                 nn.Linear(128, 20))

    def embed(self, token_lists):
        flat = torch.tensor([t for toks in token_lists for t in toks], dtype=torch.long)
        offsets = torch.tensor([0] + [len(t) for t in token_lists[:-1]]).cumsum(0)
        return self.emb(flat, offsets)

    def forward(self, feats):
        return self.mlp(feats).softmax(-1)


class Server:
    def __init__(self, model, max_batch=32, fixed=False):
        self.model = model.eval()
        self.inbox = queue.Queue()
        self.max_batch = max_batch
        self.fixed = fixed
        self.served = 0

    def _drain(self):
        batch = [self.inbox.get()]
        while len(batch) < self.max_batch:
            try:
                batch.append(self.inbox.get_nowait())
            except queue.Empty:
                break
        return batch

    @torch.inference_mode()
    def handle(self, batch):
        feats = self.model.embed([r.token_ids for r in batch])
        if self.fixed:
            probs = self.model(feats)
        else:
            probs = torch.cat([self.model(f.unsqueeze(0)) for f in feats])  # PLANTED
        top = probs.topk(3, dim=-1)
        for r, vals, idx in zip(batch, top.values, top.indices):
            r.reply.put((r.rid, idx.tolist(), vals.tolist()))
        self.served += len(batch)

    def serve_forever(self, stop):
        while not (stop.is_set() and self.inbox.empty()):
            try:
                batch = self._drain()
            except queue.Empty:
                continue
            if batch[0] is None:
                break
            self.handle(batch)


def client_load(server, n_requests, replies, seed):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(8, 64, (n_requests,), generator=g).tolist()
    pool = torch.randint(0, VOCAB, (sum(lens),), generator=g).tolist()
    off = 0
    for rid, L in enumerate(lens):
        toks = pool[off:off + L]
        off += L
        server.inbox.put(Request(rid, toks, replies))
        if rid % 256 == 255:
            time.sleep(0.001)  # bursty traffic
    server.inbox.put(None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--requests", type=int, default=100000)
    args = ap.parse_args()
    torch.manual_seed(0)
    server = Server(BagOfWordsScorer(), max_batch=32, fixed=args.fixed)
    replies = queue.Queue()
    # pre-fill the queue (simulates a backlog), then serve
    client_load(server, args.requests, replies, seed=1)
    t0 = time.time()
    server.serve_forever(threading.Event())
    dt = time.time() - t0
    hist = torch.zeros(20, dtype=torch.long)
    while not replies.empty():
        _, idx, _ = replies.get()
        hist[idx[0]] += 1
    print(f"served {server.served} requests in {dt:.2f}s ({server.served / dt:.0f} req/s)")
    print("top-1 class histogram:", hist.tolist())


if __name__ == "__main__":
    main()

"""Micro-batching inference server for a small intent-classification transformer.

Requests arrive on a queue (simulated by a producer thread); a worker pulls up to
`max_batch` of them, tokenizes + pads them, runs the encoder and posts replies.
"""
import argparse
import queue
import random
import threading
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn

VOCAB = 8000
PAD_ID = 0
N_INTENTS = 24


@dataclass
class Request:
    rid: int
    token_ids: list
    reply: "queue.Queue" = field(default_factory=lambda: queue.Queue(maxsize=1))


class IntentEncoder(nn.Module):
    def __init__(self, d_model=256, n_heads=4, n_layers=4, max_len=512):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d_model, padding_idx=PAD_ID)
        self.pos = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=4 * d_model,
                                           dropout=0.1, batch_first=True, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, N_INTENTS)

    def forward(self, ids, pad_mask):
        pos = torch.arange(ids.shape[1], device=ids.device)
        h = self.tok(ids) + self.pos(pos)[None]
        h = self.enc(h, src_key_padding_mask=pad_mask)
        keep = (~pad_mask).unsqueeze(-1).float()
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return self.head(pooled)


class InferenceServer:
    def __init__(self, model, max_batch=16, max_len=512, fixed=False):
        self.model = model.eval()
        self.max_batch = max_batch
        self.max_len = max_len
        self.fixed = fixed
        self.inbox: "queue.Queue[Request | None]" = queue.Queue()
        self.served = 0
        self.batches = 0

    def submit(self, req):
        self.inbox.put(req)

    def _collect(self):
        first = self.inbox.get()
        if first is None:
            return None
        batch = [first]
        while len(batch) < self.max_batch:
            try:
                nxt = self.inbox.get(timeout=0.002)
            except queue.Empty:
                break
            if nxt is None:
                self.inbox.put(None)
                break
            batch.append(nxt)
        return batch

    def _encode(self, batch):
        seqs = [r.token_ids[: self.max_len] for r in batch]
        if self.fixed:
            width = max(len(s) for s in seqs)
        else:
            width = self.max_len  # PLANTED
        ids = torch.full((len(seqs), width), PAD_ID, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        return ids, ids.eq(PAD_ID)

    @torch.inference_mode()
    def _run_batch(self, batch):
        ids, pad_mask = self._encode(batch)
        logits = self.model(ids, pad_mask)
        probs = logits.softmax(-1)
        conf, intent = probs.max(-1)
        for r, c, k in zip(batch, conf.tolist(), intent.tolist()):
            r.reply.put({"rid": r.rid, "intent": k, "confidence": round(c, 4)})
        self.served += len(batch)
        self.batches += 1

    def serve_forever(self):
        while True:
            batch = self._collect()
            if batch is None:
                return
            self._run_batch(batch)


def make_traffic(n_requests, seed=0):
    rng = random.Random(seed)
    reqs = []
    for rid in range(n_requests):
        n = rng.randint(6, 48)
        reqs.append(Request(rid, [rng.randint(1, VOCAB - 1) for _ in range(n)]))
    return reqs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--requests", type=int, default=240)
    args = ap.parse_args()

    torch.manual_seed(0)
    model = IntentEncoder()
    server = InferenceServer(model, max_batch=16, max_len=256, fixed=args.fixed)
    reqs = make_traffic(args.requests)

    worker = threading.Thread(target=server.serve_forever, daemon=True)
    t0 = time.perf_counter()
    worker.start()
    for r in reqs:
        server.submit(r)
    server.submit(None)

    hist = [0] * N_INTENTS
    for r in reqs:
        out = r.reply.get()
        hist[out["intent"]] += 1
    worker.join()
    elapsed = time.perf_counter() - t0

    print(f"served {server.served} requests in {server.batches} batches")
    print(f"throughput: {server.served / elapsed:.1f} req/s, wall {elapsed:.2f}s")
    print("top intents:", sorted(range(N_INTENTS), key=lambda k: -hist[k])[:5])


if __name__ == "__main__":
    main()

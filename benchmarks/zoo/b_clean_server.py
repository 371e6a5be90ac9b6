"""A fraud-scoring service, written with care: micro-batched, inference_mode, everything loaded once.

A listener thread queues JSON requests (one card transaction each); the scorer takes up to 64
pending requests at a time, builds one feature batch, scores it with a wide MLP and answers.
"""
import argparse
import json
import queue
import random
import threading

import torch
from torch import nn

MERCHANT_TYPES = 400
NUMERIC = ("amount", "hour", "distance_km", "age_days", "tx_last_hour", "tx_last_day")
MAX_BATCH = 64


class FraudScorer(nn.Module):
    def __init__(self, d_emb=32, hidden=1536):
        super().__init__()
        self.merchant = nn.Embedding(MERCHANT_TYPES, d_emb)
        self.mlp = nn.Sequential(nn.Linear(d_emb + len(NUMERIC), hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                                 nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.register_buffer("mean", torch.tensor([60.0, 12.0, 20.0, 900.0, 1.0, 5.0]))
        self.register_buffer("std", torch.tensor([80.0, 7.0, 40.0, 700.0, 1.5, 4.0]))

    def forward(self, merchant, numeric):
        x = torch.cat([self.merchant(merchant), (numeric - self.mean) / self.std], 1)
        return torch.sigmoid(self.mlp(x).squeeze(1))


def listener(q, n, seed=0):
    rng = random.Random(seed)
    for i in range(n):
        q.put(json.dumps({"id": i, "merchant_type": rng.randrange(MERCHANT_TYPES),
                          "amount": round(rng.expovariate(1 / 60), 2), "hour": rng.randrange(24),
                          "distance_km": round(rng.expovariate(1 / 20), 1), "age_days": rng.randrange(3000),
                          "tx_last_hour": rng.randrange(4), "tx_last_day": rng.randrange(15)}))
    q.put(None)


def take_batch(q):
    batch = [q.get()]
    while len(batch) < MAX_BATCH and batch[-1] is not None:
        try:
            batch.append(q.get_nowait())
        except queue.Empty:
            break
    return batch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20_000)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = FraudScorer().eval()
    q = queue.Queue(maxsize=4 * MAX_BATCH)
    threading.Thread(target=listener, args=(q, args.requests), daemon=True).start()
    answered, total_score = 0, 0.0
    done = False
    while not done:
        raw = take_batch(q)
        done = raw[-1] is None
        reqs = [json.loads(r) for r in raw if r is not None]
        if not reqs:
            continue
        merchant = torch.tensor([r["merchant_type"] for r in reqs])
        numeric = torch.tensor([[r[k] for k in NUMERIC] for r in reqs], dtype=torch.float32)
        with torch.inference_mode():
            scores = model(merchant, numeric).tolist()
        replies = [json.dumps({"id": r["id"], "score": round(s, 4), "block": s > 0.9}) for r, s in zip(reqs, scores)]
        answered += len(replies)
        total_score += sum(scores)
    print(f"answered {answered} requests, mean score {total_score / answered:.4f}")


if __name__ == "__main__":
    main()

"""Toy intent-classification service.

A producer pushes user utterances (already tokenised) onto a queue; the
service drains the queue in micro-batches, scores them with a small
EmbeddingBag + MLP model and keeps running statistics that are reported
at shutdown.
"""
import argparse
import queue
import threading
import time
from collections import Counter, namedtuple

import numpy as np
import torch
import torch.nn as nn

Request = namedtuple("Request", ["request_id", "token_ids"])
Response = namedtuple("Response", ["request_id", "intent", "confidence"])

VOCAB_SIZE = 30_000
EMBED_DIM = 256
HIDDEN_DIM = 2048
NUM_INTENTS = 24
SHUTDOWN = None


class IntentModel(nn.Module):
    def __init__(self, vocab_size, embed_dim, hidden_dim, num_intents):
        super().__init__()
        self.embed = nn.EmbeddingBag(vocab_size, embed_dim, mode="mean")
        self.head = nn.Sequential(
            nn.Linear(embed_dim, hidden_dim),
            nn.GELU(),
            nn.LayerNorm(hidden_dim),
            nn.Linear(hidden_dim, hidden_dim),
            nn.GELU(),
            nn.LayerNorm(hidden_dim),
            nn.Linear(hidden_dim, num_intents),
        )

    def forward(self, flat_ids, offsets):
        return self.head(self.embed(flat_ids, offsets))


class IntentService:
    def __init__(self, model, max_batch_size=64, batched_forward=False):
        self.model = model.eval()
        self.max_batch_size = max_batch_size
        self.batched_forward = batched_forward
        self.intent_counts = Counter()
        self.confidence_sum = 0.0
        self.num_served = 0
        self.low_confidence = 0

    @staticmethod
    def _collate(requests):
        lengths = [len(r.token_ids) for r in requests]
        offsets = torch.tensor([0] + lengths[:-1]).cumsum(0)
        flat = torch.from_numpy(np.concatenate([r.token_ids for r in requests]))
        return flat, offsets

    @torch.inference_mode()
    def _score(self, requests):
        if self.batched_forward:
            logits = self.model(*self._collate(requests))
        else:
            logits = torch.cat([self.model(*self._collate([r])) for r in requests])  # PLANTED
        probs = logits.softmax(dim=-1)
        confidence, intent = probs.max(dim=-1)
        return [
            Response(r.request_id, i, c)
            for r, i, c in zip(requests, intent.tolist(), confidence.tolist())
        ]

    def _record(self, responses):
        for resp in responses:
            self.intent_counts[resp.intent] += 1
            self.confidence_sum += resp.confidence
            self.low_confidence += resp.confidence < 0.1
        self.num_served += len(responses)

    def _drain(self, request_queue):
        batch = [request_queue.get()]
        while len(batch) < self.max_batch_size:
            try:
                batch.append(request_queue.get_nowait())
            except queue.Empty:
                break
        return batch

    def serve_forever(self, request_queue):
        while True:
            batch = self._drain(request_queue)
            stop = batch[-1] is SHUTDOWN
            batch = [r for r in batch if r is not SHUTDOWN]
            if batch:
                self._record(self._score(batch))
            if stop:
                return

    def report(self):
        top = self.intent_counts.most_common(3)
        return {
            "served": self.num_served,
            "mean_confidence": round(self.confidence_sum / max(self.num_served, 1), 5),
            "low_confidence": self.low_confidence,
            "top_intents": top,
        }


def request_stream(num_requests, seed):
    rng = np.random.default_rng(seed)
    for request_id in range(num_requests):
        length = int(rng.integers(4, 40))
        # Zipf-ish token distribution, clipped to the vocabulary
        tokens = np.minimum(rng.zipf(1.3, size=length), VOCAB_SIZE - 1).astype(np.int64)
        yield Request(request_id, tokens)


def producer(request_queue, num_requests, seed):
    for req in request_stream(num_requests, seed):
        request_queue.put(req)
    request_queue.put(SHUTDOWN)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = IntentModel(VOCAB_SIZE, EMBED_DIM, HIDDEN_DIM, NUM_INTENTS)
    service = IntentService(model, args.max_batch, batched_forward=args.fixed)

    request_queue = queue.Queue()
    # Fill the queue up front so that batching is identical between runs.
    producer(request_queue, args.requests, seed=1234)

    start = time.perf_counter()
    worker = threading.Thread(target=service.serve_forever, args=(request_queue,))
    worker.start()
    worker.join()
    elapsed = time.perf_counter() - start

    stats = service.report()
    print(f"served {stats['served']} requests in {elapsed:.2f}s "
          f"({stats['served'] / elapsed:.0f} req/s)")
    print(f"mean confidence {stats['mean_confidence']}, low-confidence {stats['low_confidence']}")
    print(f"top intents {stats['top_intents']}")


if __name__ == "__main__":
    main()

"""A sentiment-scoring service: worker threads take micro-batches of requests from a queue.

Each worker collects up to 16 pending requests (waiting at most 5 ms for more), tokenizes them,
pads the batch, runs a Transformer encoder classifier and answers each request on its reply queue.
"""
import argparse
import queue
import random
import threading
import time
import zlib
from contextlib import nullcontext

import torch
from torch import nn

VOCAB = 8192
MAX_LEN = 256
MAX_BATCH = 16


def tokenize(text):
    return [1] + [zlib.crc32(w.encode()) % (VOCAB - 2) + 2 for w in text.lower().split()][:MAX_LEN - 1]


class Classifier(nn.Module):
    def __init__(self, d=256, layers=2):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(MAX_LEN, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, 3)

    def forward(self, ids, pad):
        h = self.encoder(self.emb(ids) + self.pos[:ids.shape[1]], src_key_padding_mask=pad)
        h = h.masked_fill(pad[..., None], 0).sum(1) / (~pad).sum(1, keepdim=True)
        return self.head(h).softmax(-1)


def next_batch(requests):
    """Block for one request, then take whatever else arrives within 5 ms (up to MAX_BATCH)."""
    batch = [requests.get()]
    deadline = time.monotonic() + 0.005
    while len(batch) < MAX_BATCH and batch[-1] is not None:
        try:
            batch.append(requests.get(timeout=max(deadline - time.monotonic(), 0)))
        except queue.Empty:
            break
    return batch


def worker(model, requests, fixed):
    while True:
        batch = next_batch(requests)
        live = [r for r in batch if r is not None]
        if live:
            ids = [torch.tensor(tokenize(r["text"])) for r in live]
            padded = nn.utils.rnn.pad_sequence(ids, batch_first=True)
            with torch.inference_mode() if fixed else nullcontext():  # PLANTED
                probs = model(padded, padded == 0)
            for r, p in zip(live, probs.tolist()):
                r["reply"].put({"id": r["id"], "negative": p[0], "neutral": p[1], "positive": p[2]})
        if len(live) < len(batch):
            return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fixed", action="store_true", help="run the model under torch.inference_mode()")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Classifier().eval()
    requests = queue.Queue()
    threads = [threading.Thread(target=worker, args=(model, requests, args.fixed)) for _ in range(args.workers)]
    for t in threads:
        t.start()
    rng = random.Random(0)
    words = "the a movie film plot was is great awful fine boring fun long short actor story really not".split()
    reply = queue.Queue()
    for i in range(args.requests):
        # most requests are a sentence or two; a few are whole reviews
        n_words = rng.randint(150, 255) if rng.random() < 0.05 else rng.randint(6, 40)
        requests.put({"id": i, "text": " ".join(rng.choices(words, k=n_words)), "reply": reply})
    answers = [reply.get() for _ in range(args.requests)]
    for _ in threads:
        requests.put(None)
    for t in threads:
        t.join()
    positive = sum(a["positive"] > 0.5 for a in answers)
    print(f"answered {len(answers)} requests, {positive} positive")


if __name__ == "__main__":
    main()

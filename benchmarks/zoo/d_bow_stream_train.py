"""Streaming bag-of-words topic classifier.

Documents are produced by a chain of generators (source -> clean -> featurize ->
shuffle buffer -> batch) and consumed by a plain training loop, the way one
would stream a corpus too large to keep in memory.
"""
import argparse
import itertools
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 6000
N_TOPICS = 12
STOPWORDS = set(range(1, 40))  # the most frequent ids act as stopwords


def synth_corpus(n_docs, seed):
    """Yields (token_ids, topic) with a topic-dependent Zipf-ish vocabulary."""
    vocab_rng = np.random.default_rng(1234)  # topic vocabularies are shared by all splits
    base = 1.0 / np.arange(1, VOCAB + 1) ** 1.1
    cdfs = []
    for _ in range(N_TOPICS):
        p = base.copy()
        p[vocab_rng.integers(40, VOCAB, size=150)] *= 25.0
        cdfs.append(np.cumsum(p / p.sum()))
    rng = np.random.default_rng(seed)
    for _ in range(n_docs):
        topic = int(rng.integers(N_TOPICS))
        length = int(rng.integers(400, 1000))
        ids = np.searchsorted(cdfs[topic], rng.random(length))
        yield np.minimum(ids, VOCAB - 1), topic


def clean(stream, min_len=20):
    for ids, topic in stream:
        ids = ids[(ids > 0) & ~np.isin(ids, list(STOPWORDS))]
        if len(ids) >= min_len:
            yield ids, topic


def featurize(stream, fixed=False):
    for ids, topic in stream:
        if fixed:
            counts = torch.bincount(torch.from_numpy(ids), minlength=VOCAB).float()
        else:
            counts = torch.zeros(VOCAB)
            for t in ids:
                counts[t] += 1.0  # PLANTED
        tf = torch.log1p(counts)
        tf = tf / tf.norm().clamp(min=1e-6)
        yield tf, topic


def shuffle_buffer(stream, size, seed):
    rng = random.Random(seed)
    buf = []
    for item in stream:
        buf.append(item)
        if len(buf) >= size:
            yield buf.pop(rng.randrange(len(buf)))
    rng.shuffle(buf)
    yield from buf


def batched(stream, batch_size):
    it = iter(stream)
    while True:
        chunk = list(itertools.islice(it, batch_size))
        if not chunk:
            return
        x = torch.stack([c[0] for c in chunk])
        y = torch.tensor([c[1] for c in chunk])
        yield x, y


def pipeline(n_docs, batch_size, seed, fixed):
    s = synth_corpus(n_docs, seed)
    s = clean(s)
    s = featurize(s, fixed=fixed)
    s = shuffle_buffer(s, size=256, seed=seed)
    return batched(s, batch_size)


class TopicMLP(nn.Module):
    def __init__(self, hidden=256):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(VOCAB, hidden), nn.ReLU(), nn.Dropout(0.2),
            nn.Linear(hidden, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, N_TOPICS),
        )

    def forward(self, x):
        return self.net(x)


def evaluate(model, n_docs, fixed):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in pipeline(n_docs, 128, seed=999, fixed=fixed):
            correct += (model(x).argmax(-1) == y).sum().item()
            total += len(y)
    model.train()
    return correct / max(total, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--docs", type=int, default=1100)
    args = ap.parse_args()

    torch.manual_seed(0)
    model = TopicMLP()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)

    t0 = time.perf_counter()
    step = 0
    for epoch in range(args.epochs):
        running, n_batches = 0.0, 0
        for x, y in pipeline(args.docs, 128, seed=epoch, fixed=args.fixed):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            running += loss.item()
            step += 1
            n_batches += 1
        print(f"epoch {epoch}: mean loss {running / max(n_batches, 1):.4f}")
    acc = evaluate(model, 400, args.fixed)
    print(f"steps {step}, held-out acc {acc:.3f}, wall {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()

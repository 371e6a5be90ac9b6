"""Train a fastText-style classifier on a synthetic review corpus streamed through generator stages.

read_reviews -> tokenize -> batch -> train; every stage is a generator, so nothing is held in memory.
"""
import argparse
import random

import numpy as np
import torch
from torch import nn

WORDS = ("good bad great awful fine poor excellent terrible movie plot actor scene music ending story "
         "boring exciting slow fast loved hated would watch again never recommend friends family").split()
BUCKETS = 1 << 13


def read_reviews(n, seed):
    """Yield (text, label) pairs made of stock phrases; positive when positive words outnumber negative ones."""
    rng = random.Random(seed)
    pos = {"good", "great", "excellent", "loved", "exciting", "recommend"}
    neg = {"bad", "awful", "poor", "terrible", "hated", "boring"}
    phrases = [rng.choices(WORDS, k=12) for _ in range(400)]
    scores = [sum(w in pos for w in p) - sum(w in neg for w in p) for p in phrases]
    texts = [" ".join(p) for p in phrases]
    for _ in range(n):
        picked = rng.choices(range(len(phrases)), k=rng.randint(16, 32))
        yield " ".join(texts[i] for i in picked), int(sum(scores[i] for i in picked) > 0)


def trigram_ids(text, fixed):
    """Hashed character trigrams of `text` (a polynomial hash, as fastText's subword buckets)."""
    if fixed:
        c = np.frombuffer(text.encode("latin-1"), dtype=np.uint8).astype(np.int64)
        return (c[:-2] * 961 + c[1:-1] * 31 + c[2:]) % BUCKETS
    return np.array([(ord(text[i]) * 961 + ord(text[i + 1]) * 31 + ord(text[i + 2])) % BUCKETS  # PLANTED
                     for i in range(len(text) - 2)], dtype=np.int64)


def tokenize(reviews, fixed):
    """Yield each review as its distinct trigram ids with their frequencies, and the label."""
    for text, label in reviews:
        ids, counts = np.unique(trigram_ids(text, fixed), return_counts=True)
        yield ids, (counts / counts.sum()).astype(np.float32), label


def batch(samples, size):
    ids, weights, offsets, labels = [], [], [], []
    n = 0
    for tok, w, label in samples:
        offsets.append(n)
        ids.append(tok)
        weights.append(w)
        labels.append(label)
        n += len(tok)
        if len(labels) == size:
            yield (torch.from_numpy(np.concatenate(ids)), torch.from_numpy(np.concatenate(weights)),
                   torch.tensor(offsets), torch.tensor(labels))
            ids, weights, offsets, labels, n = [], [], [], [], 0


class FastText(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.emb = nn.EmbeddingBag(BUCKETS, dim, mode="sum")
        self.out = nn.Linear(dim, 2)

    def forward(self, ids, weights, offsets):
        """The frequency-weighted mean of each review's trigram embeddings, classified."""
        return self.out(self.emb(ids, offsets, per_sample_weights=weights))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=10000)
    ap.add_argument("--fixed", action="store_true", help="vectorised trigram hashing")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = FastText()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    correct = seen = 0
    for step, (ids, weights, offsets, labels) in enumerate(batch(tokenize(read_reviews(args.docs, 0), args.fixed),
                                                                 128)):
        logits = model(ids, weights, offsets)
        loss = nn.functional.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        correct += (logits.argmax(1) == labels).sum().item()
        seen += len(labels)
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f} acc {correct / seen:.3f}")
            correct = seen = 0


if __name__ == "__main__":
    main()

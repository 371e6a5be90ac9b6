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
    for text, label in reviews:
        yield trigram_ids(text, fixed), label


def batch(samples, size):
    ids, offsets, labels = [], [], []
    n = 0
    for tok, label in samples:
        offsets.append(n)
        ids.append(tok)
        labels.append(label)
        n += len(tok)
        if len(labels) == size:
            yield torch.from_numpy(np.concatenate(ids)), torch.tensor(offsets), torch.tensor(labels)
            ids, offsets, labels, n = [], [], [], 0


class FastText(nn.Module):
    def __init__(self, dim=64):
        super().__init__()
        self.emb = nn.EmbeddingBag(BUCKETS, dim, mode="mean")
        self.out = nn.Linear(dim, 2)

    def forward(self, ids, offsets):
        return self.out(self.emb(ids, offsets))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=6000)
    ap.add_argument("--fixed", action="store_true", help="vectorised trigram hashing")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = FastText()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    correct = seen = 0
    for step, (ids, offsets, labels) in enumerate(batch(tokenize(read_reviews(args.docs, 0), args.fixed), 64)):
        logits = model(ids, offsets)
        loss = nn.functional.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        correct += (logits.argmax(1) == labels).sum().item()
        seen += len(labels)
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f} acc {correct / seen:.3f}")
            correct = seen = 0


if __name__ == "__main__":
    main()

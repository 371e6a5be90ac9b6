"""Train a fastText-style topic classifier on a synthetic news corpus."""
import argparse
import random
import time
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from model import FastTextClassifier, collate_batch
from tokenizer import WordTokenizer

SYLLABLES = ["ka", "lo", "mi", "ren", "tu", "sha", "vo", "ne", "qui", "dar",
             "el", "po", "zan", "fi", "gro", "bel", "ix", "mu", "tor", "sa"]


def make_lexicon(n_words, rng):
    words = set()
    while len(words) < n_words:
        k = rng.randint(2, 4)
        words.add("".join(rng.choice(SYLLABLES) for _ in range(k)))
    return sorted(words)


def synth_corpus(n_docs, n_classes, lexicon, rng, np_rng):
    """Zipf-distributed background words plus class-specific keywords."""
    n = len(lexicon)
    ranks = np.arange(1, n + 1)
    probs = 1.0 / ranks ** 0.9
    probs /= probs.sum()
    perm = np_rng.permutation(n)
    keywords = [perm[c * 40:(c + 1) * 40] for c in range(n_classes)]
    lengths = np_rng.integers(30, 91, size=n_docs)
    background = np_rng.choice(n, size=int(lengths.sum()), p=probs)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    docs = []
    for d in range(n_docs):
        label = rng.randrange(n_classes)
        length = int(lengths[d])
        bg = background[starts[d]:starts[d + 1]]
        kw = np_rng.choice(keywords[label], size=max(3, length // 8))
        words = [lexicon[i] for i in np.concatenate([bg, kw])]
        rng.shuffle(words)
        text = " ".join(words).capitalize() + "."
        docs.append((text, label))
    return docs


def evaluate(model, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for ids, offsets, labels in loader:
            pred = model(ids, offsets).argmax(-1)
            correct += (pred == labels).sum().item()
            total += labels.numel()
    model.train()
    return correct / total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    rng = random.Random(0)
    np_rng = np.random.default_rng(0)
    torch.manual_seed(0)

    lexicon = make_lexicon(20000, rng)
    data = synth_corpus(2600, 8, lexicon, rng, np_rng)
    split = int(0.85 * len(data))
    train_data, val_data = data[:split], data[split:]

    tokenizer = WordTokenizer(max_vocab=25000, fast_lookup=args.fixed)
    tokenizer.fit(t for t, _ in train_data)
    print(f"vocab size: {len(tokenizer)}")

    collate = partial(collate_batch, tokenizer=tokenizer)
    train_loader = DataLoader(train_data, batch_size=args.batch_size, shuffle=True, collate_fn=collate)
    val_loader = DataLoader(val_data, batch_size=256, collate_fn=collate)

    model = FastTextClassifier(len(tokenizer), 8)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=1e-4)

    for epoch in range(args.epochs):
        t0 = time.time()
        running = 0.0
        for step, (ids, offsets, labels) in enumerate(train_loader):
            logits = model(ids, offsets)
            loss = F.cross_entropy(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.item()
        acc = evaluate(model, val_loader)
        print(f"epoch {epoch}: loss {running / (step + 1):.4f} val_acc {acc:.3f} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()

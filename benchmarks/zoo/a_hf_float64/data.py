"""A synthetic three-way topic-classification corpus, tokenized once into padded id tensors."""

from __future__ import annotations

import random

import torch

TOPICS = [["goal", "match", "team", "score", "league"], ["market", "stock", "price", "bank", "trade"],
          ["planet", "orbit", "star", "rocket", "moon"]]


def make_corpus(n: int, seed: int = 0) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    filler = [f"w{i}" for i in range(3000)]
    out = []
    for _ in range(n):
        label = rng.randrange(3)
        words = rng.choices(filler, k=rng.randint(20, 60)) + rng.choices(TOPICS[label], k=4)
        rng.shuffle(words)
        out.append((" ".join(words), label))
    return out


class WhitespaceTokenizer:
    def __init__(self, texts: list[str], vocab_size: int):
        counts: dict[str, int] = {}
        for text in texts:
            for w in text.split():
                counts[w] = counts.get(w, 0) + 1
        words = sorted(counts, key=lambda w: -counts[w])[:vocab_size - 3]
        self.vocab = {w: i + 3 for i, w in enumerate(words)}  # 0 pad, 1 cls, 2 unk

    def __call__(self, texts: list[str], max_length: int) -> dict:
        ids = torch.zeros(len(texts), max_length, dtype=torch.long)
        for row, text in enumerate(texts):
            toks = [1] + [self.vocab.get(w, 2) for w in text.split()][:max_length - 1]
            ids[row, :len(toks)] = torch.tensor(toks)
        return {"input_ids": ids, "attention_mask": ids != 0}

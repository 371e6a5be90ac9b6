"""A synthetic review corpus: Zipf-distributed words built from syllables, two sentiment classes."""

from __future__ import annotations

import random

SYLLABLES = ["ka", "lo", "mi", "ne", "tu", "ra", "shi", "po", "ven", "dar", "qui", "zel", "mon", "tra", "fy"]
POSITIVE = ["great", "lovely", "superb", "enjoyable", "brilliant"]
NEGATIVE = ["awful", "boring", "terrible", "dull", "broken"]


def make_vocabulary(rng: random.Random, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))))
    return sorted(words)


def make_reviews(n: int, seed: int = 0, length: tuple[int, int] = (60, 140)) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    words = make_vocabulary(rng, 3000)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    reviews = []
    for _ in range(n):
        label = rng.randint(0, 1)
        body = rng.choices(words, weights, k=rng.randint(*length))
        for _ in range(3):
            body.insert(rng.randrange(len(body)), rng.choice(POSITIVE if label else NEGATIVE))
        text = " ".join(body).capitalize() + rng.choice([".", "!", "...", " :)"])
        reviews.append((text, label))
    return reviews

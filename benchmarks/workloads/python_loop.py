"""Pure Python work (featurizing text) with a few tensor ops, no steps (~3 s bare)."""
import torch

WORDS = "the quick brown fox jumps over the lazy dog and it was the best of times".split()
counts = torch.zeros(64)
for doc in range(400):
    bucket = [0.0] * 64
    for i in range(2000):
        word = WORDS[(doc * 7 + i) % len(WORDS)]
        bucket[(len(word) * 31 + ord(word[0])) % 64] += 1.0
    counts += torch.tensor(bucket)
print(float(counts.sum()))

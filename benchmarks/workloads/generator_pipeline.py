"""A generator pipeline: batches produced, transformed and reduced by chained Python generators,
no DataLoader, no module, no optimizer (~3 s bare)."""
import torch


def produce(n):
    g = torch.Generator().manual_seed(0)
    for _ in range(n):
        yield torch.randn(256, 128, generator=g)


def normalise(batches):
    for x in batches:
        yield (x - x.mean(dim=0)) / (x.std(dim=0) + 1e-5)


def project(batches, w):
    for x in batches:
        yield torch.tanh(x @ w)


w = torch.randn(128, 64)
total = 0.0
for y in project(normalise(produce(1500)), w):
    total += float(y.abs().mean())
print(total)

"""GPU: an evaluation script computing per-example metrics in Python with `.item()`.

A classifier is evaluated over a stream of batches made by a generator; the metrics helper
walks each batch example by example, reading predictions and labels with `.item()`: one
device-to-host sync per read, thousands per batch. The fix compares on the GPU and reads one
number per batch.
"""
import sys
import time

import torch
from torch import nn

FIXED = "--fixed" in sys.argv
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def batches(n_batches: int, batch: int = 512, dim: int = 1024, classes: int = 100):
    g = torch.Generator(device=DEVICE).manual_seed(0)
    for _ in range(n_batches):
        x = torch.randn(batch, dim, device=DEVICE, generator=g)
        y = torch.randint(0, classes, (batch,), device=DEVICE, generator=g)
        yield x, y


class Accuracy:
    def __init__(self):
        self.correct = 0
        self.seen = 0
        self.correct_gpu = torch.zeros((), dtype=torch.long, device=DEVICE)

    def update(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        pred = logits.argmax(dim=1)
        if FIXED:
            self.correct_gpu += (pred == labels).sum()
        else:
            for i in range(labels.shape[0]):
                self.correct += int(pred[i].item() == labels[i].item())  # PLANTED: two host syncs per example
        self.seen += labels.shape[0]

    def compute(self) -> float:
        return (self.correct + int(self.correct_gpu)) / max(self.seen, 1)


def evaluate(model: nn.Module, n_batches: int) -> float:
    metric = Accuracy()
    with torch.no_grad():
        for x, y in batches(n_batches):
            metric.update(model(x), y)
    return metric.compute()


if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 100)).to(DEVICE).eval()
    t0 = time.perf_counter()
    print("accuracy", evaluate(model, 400), "in", round(time.perf_counter() - t0, 2), "s")

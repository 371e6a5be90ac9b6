"""Offline evaluation harness for an audio-event classifier (CPU, no training).

Organised like a tiny evaluation package:
  * ``FeatureShards``   - deterministic synthetic stand-in for pre-computed
                          log-mel feature shards (batches of feature vectors
                          plus integer labels, with some label noise);
  * ``EventClassifier`` - a small residual MLP that maps a feature vector to
                          logits over the event classes;
  * ``MetricsTracker``  - accumulates top-1 / top-5 accuracy, a confusion
                          matrix, mean NLL and per-class recall;
  * ``Evaluator``       - drives the model over a fixed number of batches
                          under ``torch.inference_mode()`` and reports.

Planted problem: ``MetricsTracker.update`` fills the confusion matrix with a
Python loop over every sample of the batch, indexing and incrementing the
count tensor one element at a time.  With ~1.5M samples the per-element
tensor operations cost far more than the model itself.

Fix (``--fixed``): the confusion-matrix update is done for the whole batch
at once with ``torch.bincount`` on ``target * C + pred``.  The counts, and
hence every reported metric, are identical.
"""
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = "--fixed" in sys.argv

N_CLASSES = 50
FEAT_DIM = 64
HIDDEN = 64
BATCH = 1024
N_BATCHES = 1500


class FeatureShards:
    """Synthetic batches: class prototypes + noise, 8% of labels flipped."""

    def __init__(self, n_batches, batch_size, seed=123):
        self.n_batches = n_batches
        self.batch_size = batch_size
        g = torch.Generator().manual_seed(seed)
        self.prototypes = torch.randn(N_CLASSES, FEAT_DIM, generator=g) * 0.8
        self.seed = seed

    def __len__(self):
        return self.n_batches

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + 1)
        for _ in range(self.n_batches):
            y = torch.randint(0, N_CLASSES, (self.batch_size,), generator=g)
            x = self.prototypes[y] + torch.randn(self.batch_size, FEAT_DIM, generator=g)
            flip = torch.rand(self.batch_size, generator=g) < 0.08
            y = torch.where(flip, torch.randint(0, N_CLASSES, (self.batch_size,), generator=g), y)
            yield x, y


class ResidualBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, dim * 2)
        self.fc2 = nn.Linear(dim * 2, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class EventClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(FEAT_DIM, HIDDEN)
        self.blocks = nn.Sequential(ResidualBlock(HIDDEN))
        self.head = nn.Linear(HIDDEN, N_CLASSES)

    def forward(self, x):
        return self.head(self.blocks(F.gelu(self.inp(x))))


class MetricsTracker:
    def __init__(self, n_classes):
        self.n_classes = n_classes
        self.confusion = torch.zeros(n_classes, n_classes, dtype=torch.long)
        self.top5_hits = 0
        self.nll_sum = 0.0
        self.count = 0

    def update(self, logits, targets):
        preds = logits.argmax(dim=1)
        if FIXED:
            idx = targets * self.n_classes + preds
            self.confusion += torch.bincount(idx, minlength=self.n_classes ** 2).view(
                self.n_classes, self.n_classes)
        else:
            for t, p in zip(targets, preds):  # PLANTED: per-sample Python loop of tiny tensor ops to fill the confusion matrix
                self.confusion[t, p] += 1
        top5 = logits.topk(5, dim=1).indices
        self.top5_hits += int((top5 == targets[:, None]).any(dim=1).sum())
        self.nll_sum += float(F.cross_entropy(logits, targets, reduction="sum"))
        self.count += targets.numel()

    def summary(self):
        cm = self.confusion.double()
        support = cm.sum(dim=1).clamp_min(1)
        recall = cm.diag() / support
        return {
            "top1": float(cm.diag().sum() / self.count),
            "top5": self.top5_hits / self.count,
            "nll": self.nll_sum / self.count,
            "macro_recall": float(recall.mean()),
            "worst_class": int(recall.argmin()),
        }


class Evaluator:
    def __init__(self, model, data, metrics):
        self.model = model.eval()
        self.data = data
        self.metrics = metrics

    @torch.inference_mode()
    def run(self, log_every=300):
        t0 = time.perf_counter()
        for step, (x, y) in enumerate(self.data, 1):
            logits = self.model(x)
            self.metrics.update(logits, y)
            if step % log_every == 0:
                print(f"  batch {step}/{len(self.data)}  "
                      f"running top1 {self.metrics.summary()['top1']:.4f}  "
                      f"{time.perf_counter() - t0:.1f}s")
        return self.metrics.summary()


def main():
    torch.manual_seed(0)
    model = EventClassifier()
    data = FeatureShards(N_BATCHES, BATCH)
    metrics = MetricsTracker(N_CLASSES)
    res = Evaluator(model, data, metrics).run()
    for k, v in res.items():
        print(f"{k:>13}: {v}")
    cm = metrics.confusion.numpy()
    weights = np.arange(1, cm.size + 1, dtype=np.int64).reshape(cm.shape)
    print(f"checksum: {int((cm * weights).sum())} {res['top5']:.6f}")


if __name__ == "__main__":
    main()

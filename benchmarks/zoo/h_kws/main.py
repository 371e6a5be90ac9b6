"""Train a small CNN keyword spotter on synthetic audio with a log-mel front end."""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import SyntheticKeywords  # noqa: E402
from features import LogMel  # noqa: E402


class KeywordCNN(nn.Module):
    """Temporal CNN: mel bins are channels, convolution runs along time."""

    def __init__(self, n_mels, n_classes, width=32):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(n_mels, width, 5, padding=2), nn.BatchNorm1d(width), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(width, width, 5, padding=2), nn.BatchNorm1d(width), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(width, width, 3, padding=1), nn.BatchNorm1d(width), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1),
        )
        self.head = nn.Linear(width, n_classes)

    def forward(self, x):
        return self.head(self.body(x).flatten(1))


def evaluate(model, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
            total += y.numel()
    model.train()
    return correct / total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--n-classes", type=int, default=8)
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)

    featurizer = LogMel(fixed=args.fixed)
    train_set = SyntheticKeywords(640, args.n_classes, featurizer, seed=1)
    val_set = SyntheticKeywords(160, args.n_classes, featurizer, seed=2)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=args.batch_size)

    model = KeywordCNN(n_mels=40, n_classes=args.n_classes)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()

    t0 = time.time()
    for epoch in range(args.epochs):
        running, n = 0.0, 0
        for x, y in train_loader:
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.item() * y.numel()
            n += y.numel()
        acc = evaluate(model, val_loader)
        print(f"epoch {epoch + 1}: train loss {running / n:.4f}  val acc {acc:.3f}")
    print(f"training took {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()

"""Train a 1-D CNN on sensor windows stored in a compressed .npz archive (human-activity recognition).

The archive is written first (as the data-collection step would), then read through a Dataset.
"""
import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

CHANNELS = 6
WINDOW = 128


def write_archive(path, n, seed=0):
    """Accelerometer + gyroscope windows: a class-dependent oscillation plus noise, and their labels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 6, n)
    t = np.arange(WINDOW) / 50.0
    freq = (1 + labels)[:, None, None] * np.linspace(0.8, 1.2, CHANNELS)[None, :, None]
    x = np.sin(2 * np.pi * freq * t) + 0.5 * rng.standard_normal((n, CHANNELS, WINDOW))
    np.savez_compressed(path, windows=x.astype(np.float32), labels=labels)


class SensorWindows(Dataset):
    def __init__(self, path, preload):
        self.path = path
        with np.load(path) as f:
            self.n = len(f["labels"])
            self.windows, self.labels = (f["windows"], f["labels"]) if preload else (None, None)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.windows is not None:
            x, y = self.windows[i], self.labels[i]
        else:
            with np.load(self.path) as f:
                x, y = f["windows"][i], f["labels"][i]  # PLANTED
        x = (x - x.mean(axis=1, keepdims=True)) / (x.std(axis=1, keepdims=True) + 1e-6)
        return torch.from_numpy(x), int(y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--windows", type=int, default=400)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--fixed", action="store_true", help="load the arrays once in __init__")
    args = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "har.npz"
        write_archive(path, args.windows)
        loader = DataLoader(SensorWindows(path, preload=args.fixed), batch_size=16, shuffle=True, num_workers=0)
        model = nn.Sequential(nn.Conv1d(CHANNELS, 32, 7, padding=3), nn.ReLU(), nn.MaxPool1d(2),
                              nn.Conv1d(32, 64, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1), nn.Flatten(),
                              nn.Linear(64, 6))
        opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
        for epoch in range(args.epochs):
            total = correct = 0
            for x, y in loader:
                logits = model(x)
                loss = nn.functional.cross_entropy(logits, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                correct += (logits.argmax(1) == y).sum().item()
                total += len(y)
            print(f"epoch {epoch} loss {loss.item():.3f} train acc {correct / total:.3f}")


if __name__ == "__main__":
    main()

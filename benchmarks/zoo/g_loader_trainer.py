"""GPU: a Trainer class fed by a DataLoader whose samples are decoded and augmented in NumPy.

Each sample is a 64x64 uint8 image "decoded" from a byte buffer, randomly cropped, flipped,
jittered and normalised in NumPy (about a millisecond of CPU work); the loader runs in the main
process, so the GPU waits for every batch. The fix loads with worker processes and pinned memory.
"""
import sys
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

FIXED = "--fixed" in sys.argv
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class EncodedImages(Dataset):
    def __init__(self, n: int = 6144, side: int = 72):
        rng = np.random.default_rng(0)
        self.blobs = [rng.integers(0, 256, size=(side, side, 3), dtype=np.uint8).tobytes() for _ in range(256)]
        self.n, self.side = n, side
        self.labels = rng.integers(0, 10, size=n)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        img = np.frombuffer(self.blobs[i % 256], dtype=np.uint8).reshape(self.side, self.side, 3)
        rng = np.random.default_rng(i)
        top, left = rng.integers(0, self.side - 64, size=2)
        img = img[top:top + 64, left:left + 64].astype(np.float32) / 255.0
        if rng.random() < 0.5:
            img = img[:, ::-1]
        for _ in range(6):  # colour jitter and blur passes
            img = np.clip(img * rng.uniform(0.9, 1.1) + rng.normal(0, 0.01, size=img.shape), 0, 1)
            img = (img + np.roll(img, 1, axis=0) + np.roll(img, 1, axis=1)) / 3.0
        img = ((img - 0.5) / 0.25).astype(np.float32)
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))), int(self.labels[i])


class Trainer:
    def __init__(self, model: nn.Module, dataset: Dataset, batch_size: int = 128):
        self.model = model.to(DEVICE)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        if FIXED:
            self.loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=8,
                                     pin_memory=True, drop_last=True)
        else:
            self.loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True)  # PLANTED: decoded in the main process

    def train_epoch(self) -> float:
        total = torch.zeros((), device=DEVICE)
        for x, y in self.loader:
            x, y = x.to(DEVICE, non_blocking=True), y.to(DEVICE, non_blocking=True)
            loss = nn.functional.cross_entropy(self.model(x), y)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            total += loss.detach()
        return float(total) / len(self.loader)


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(128, 256, 3, padding=1), nn.BatchNorm2d(256), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Linear(256, 10))


if __name__ == "__main__":
    t0 = time.perf_counter()
    trainer = Trainer(make_model(), EncodedImages())
    print("loss", round(trainer.train_epoch(), 4), "in", round(time.perf_counter() - t0, 2), "s")

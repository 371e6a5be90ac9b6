"""Train a small residual CNN on procedurally generated texture patches.

A map-style Dataset keeps a bank of base textures (sinusoidal gratings whose
orientation encodes the class) and, per sample, runs a numpy augmentation chain:
reflect-pad random crop, horizontal flip, colour jitter, a per-row shear wobble,
cutout and gamma. `stream()` wraps a DataLoader as a generator that moves each
batch to the device, and `main()` folds the stream into a Trainer with
functools.reduce, so there is no explicit step loop in the main script.

Planted problem: the DataLoader is built with num_workers=0, so the numpy
augmentation of all 128 samples of every batch (~0.6-0.9 ms each, ~100 ms a batch)
runs serially in the main process while the GPU finishes its bf16 step in a few
milliseconds and then waits for the next batch.
Fix (--fixed): num_workers=8 with persistent workers and prefetching, so the
augmentation runs in parallel worker processes and overlaps the training step.
Augmentation randomness is seeded by sample index and the shuffle order comes
from a dedicated generator, so both versions train on identical batches and print
the same checksum.
"""
import functools
import os
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, RandomSampler

FIXED = "--fixed" in sys.argv
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

SEED = 1234
IMG = 64
PAD = 4
NUM_CLASSES = 10
BANK_SIZE = 320
BATCH = 128 if DEVICE == "cuda" else 32
STEPS_PER_EPOCH = 60 if DEVICE == "cuda" else 4
EPOCHS = 2
LOADER_WORKERS = min(8, os.cpu_count() or 1)
MEAN = np.array([0.5, 0.5, 0.5], dtype=np.float32)
STD = np.array([0.25, 0.25, 0.25], dtype=np.float32)


def make_texture_bank(n, size, seed):
    """Class-coded gratings plus noise, stored as uint8 HWC."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % NUM_CLASSES
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    theta = labels * (np.pi / NUM_CLASSES) + rng.normal(0, 0.05, n)
    freq = rng.uniform(0.15, 0.35, n)
    phase = rng.uniform(0, 2 * np.pi, n)
    proj = (np.cos(theta)[:, None, None] * xx + np.sin(theta)[:, None, None] * yy)
    wave = np.sin(freq[:, None, None] * proj + phase[:, None, None])
    tint = rng.uniform(0.3, 1.0, (n, 1, 1, 3))
    img = 0.5 + 0.35 * wave[..., None] * tint + rng.normal(0, 0.08, (n, size, size, 3))
    return (np.clip(img, 0, 1) * 255).astype(np.uint8), labels.astype(np.int64)


class TexturePatches(Dataset):
    def __init__(self, length, seed):
        self.length = length
        self.seed = seed
        self.bank, self.labels = make_texture_bank(BANK_SIZE, IMG + 8, seed)

    def __len__(self):
        return self.length

    def augment(self, img, rng):
        padded = np.pad(img, ((PAD, PAD), (PAD, PAD), (0, 0)), mode="reflect")
        y0, x0 = rng.integers(0, padded.shape[0] - IMG + 1, size=2)
        img = padded[y0:y0 + IMG, x0:x0 + IMG]
        if rng.random() < 0.5:
            img = img[:, ::-1]
        img = img * rng.uniform(0.8, 1.2, size=3).astype(np.float32)
        img = img + rng.uniform(-0.08, 0.08, size=3).astype(np.float32)
        gray = img.mean(axis=2, keepdims=True)
        img = gray + (img - gray) * np.float32(rng.uniform(0.7, 1.3))
        amp = rng.uniform(0.0, 3.0)
        phase = rng.uniform(0.0, 2 * np.pi)
        sheared = np.empty_like(img)
        for r in range(IMG):
            shift = int(round(amp * np.sin(phase + 0.2 * r)))
            sheared[r] = np.roll(img[r], shift, axis=0)
        cy, cx = rng.integers(0, IMG, size=2)
        half = int(rng.integers(4, 12))
        sheared[max(0, cy - half):cy + half, max(0, cx - half):cx + half] = gray.mean()
        img = np.clip(sheared, 0.0, 1.0) ** np.float32(rng.uniform(0.8, 1.25))
        img = (img - MEAN) / STD
        return np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32)

    def __getitem__(self, idx):
        b = idx % BANK_SIZE
        rng = np.random.default_rng((self.seed, idx))
        base = self.bank[b].astype(np.float32) * np.float32(1.0 / 255.0)
        return torch.from_numpy(self.augment(base, rng)), int(self.labels[b])


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = None
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.skip is None else self.skip(x)))


class TextureNet(nn.Module):
    def __init__(self, widths=(32, 64, 128, 256)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True))
        blocks, cin = [], widths[0]
        for i, w in enumerate(widths):
            blocks.append(Block(cin, w, 1 if i == 0 else 2))
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, NUM_CLASSES)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


@dataclass
class RunStats:
    loss_sum: torch.Tensor
    correct: torch.Tensor
    seen: int = 0
    steps: int = 0


class Trainer:
    def __init__(self, model, total_steps):
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=0.08, momentum=0.9,
                                   nesterov=True, weight_decay=5e-4)
        self.sched = torch.optim.lr_scheduler.OneCycleLR(self.opt, max_lr=0.08,
                                                         total_steps=total_steps)

    def fit_batch(self, stats, batch):
        x, y = batch
        self.model.train()
        with torch.autocast(device_type=DEVICE, dtype=torch.bfloat16, enabled=DEVICE == "cuda"):
            logits = self.model(x)
            loss = F.cross_entropy(logits.float(), y, label_smoothing=0.05)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.sched.step()
        stats.loss_sum += loss.detach()
        stats.correct += (logits.argmax(1) == y).sum()
        stats.seen += y.numel()
        stats.steps += 1
        return stats


def build_loader(dataset):
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(SEED))
    return DataLoader(
        dataset,
        batch_size=BATCH,
        sampler=sampler,
        num_workers=LOADER_WORKERS if FIXED else 0,  # PLANTED: per-sample numpy augmentation runs serially in the main process
        persistent_workers=FIXED,
        prefetch_factor=4 if FIXED else None,
        pin_memory=DEVICE == "cuda",
        drop_last=True,
        generator=torch.Generator().manual_seed(SEED + 1),
    )


def stream(loader, epochs):
    for _ in range(epochs):
        for x, y in loader:
            yield x.to(DEVICE, non_blocking=True), y.to(DEVICE, non_blocking=True)


def main():
    torch.manual_seed(SEED)
    dataset = TexturePatches(BATCH * STEPS_PER_EPOCH, SEED)
    model = TextureNet().to(DEVICE)
    trainer = Trainer(model, EPOCHS * STEPS_PER_EPOCH)
    loader = build_loader(dataset)
    zero = torch.zeros((), device=DEVICE)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    stats = functools.reduce(trainer.fit_batch, stream(loader, EPOCHS),
                             RunStats(zero.clone(), zero.clone()))
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    mean_loss = (stats.loss_sum / stats.steps).item()
    acc = (stats.correct / stats.seen).item()
    weight_norm = sum(p.detach().double().abs().sum() for p in model.parameters()).item()
    print(f"mode={'fixed' if FIXED else 'planted'} device={DEVICE} steps={stats.steps} "
          f"samples={stats.seen}")
    print(f"checksum: mean_loss={mean_loss:.4f} train_acc={acc:.4f} weight_l1={weight_norm:.3f}")
    print(f"elapsed_s={elapsed:.2f}")


if __name__ == "__main__":
    main()

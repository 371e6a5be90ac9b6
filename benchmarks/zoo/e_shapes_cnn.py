"""Train a small CNN on a synthetic 'shapes' image set stored as .npz archives."""
import argparse
import os
import shutil
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

N_CLASSES = 10
SIZE = 32


def render_split(n, rng, palette):
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    images = np.empty((n, SIZE, SIZE, 3), dtype=np.uint8)
    labels = rng.integers(0, N_CLASSES, n)
    for i, c in enumerate(labels):
        cy, cx = rng.integers(8, SIZE - 8, 2)
        r = 4 + c % 4
        if c < 4:
            mask = (yy - cy) ** 2 + (xx - cx) ** 2 < r * r
        elif c < 7:
            mask = (abs(yy - cy) < r) & (abs(xx - cx) < r)
        else:
            mask = abs(yy - cy) + abs(xx - cx) < r + 2
        bg = rng.integers(0, 90, 3)
        img = np.broadcast_to(bg, (SIZE, SIZE, 3)).astype(np.float32)
        img = img + rng.normal(0, 18, (SIZE, SIZE, 3))
        img[mask] = palette[c] + rng.normal(0, 10, 3)
        images[i] = np.clip(img, 0, 255)
    return images, labels


def write_archive(path, images, labels):
    mean = images.reshape(-1, 3).mean(0) / 255.0
    std = images.reshape(-1, 3).std(0) / 255.0
    np.savez(path, images=images, labels=labels, mean=mean, std=std)


class ShapesDataset(Dataset):
    def __init__(self, path, train=True, pad=4, fixed=False):
        self.archive = np.load(path)  # PLANTED
        if fixed:
            self.archive = dict(self.archive)
        self.train, self.pad = train, pad
        self.mean = self.archive["mean"].astype(np.float32)
        self.std = self.archive["std"].astype(np.float32)
        self.length = len(self.archive["labels"])

    def __len__(self):
        return self.length

    def augment(self, img):
        p = self.pad
        img = np.pad(img, ((p, p), (p, p), (0, 0)), mode="reflect")
        y, x = np.random.randint(0, 2 * p + 1, 2)
        img = img[y:y + SIZE, x:x + SIZE]
        if np.random.rand() < 0.5:
            img = img[:, ::-1]
        return img * np.random.uniform(0.8, 1.2)

    def __getitem__(self, idx):
        img = self.archive["images"][idx].astype(np.float32) / 255.0
        label = int(self.archive["labels"][idx])
        if self.train:
            img = self.augment(img)
        img = (img - self.mean) / self.std
        return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32)), label


class ResBlock(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.c1 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(ch)
        self.c2 = nn.Conv2d(ch, ch, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm2d(ch)

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)))
        return F.relu(x + self.b2(self.c2(h)))


class SmallResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.stage1 = ResBlock(16)
        self.down = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.stage2 = ResBlock(32)
        self.head = nn.Linear(32, N_CLASSES)

    def forward(self, x):
        x = self.stage1(self.stem(x))
        x = self.stage2(self.down(x))
        return self.head(x.mean((2, 3)))


def evaluate(model, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    return correct / total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    t_start = time.time()
    rng = np.random.default_rng(0)
    np.random.seed(0)
    torch.manual_seed(0)
    workdir = tempfile.mkdtemp(prefix="shapes_")
    palette = rng.integers(40, 255, (N_CLASSES, 3))
    for split, n in (("train", 1300), ("val", 400)):
        write_archive(os.path.join(workdir, f"{split}.npz"), *render_split(n, rng, palette))

    train_ds = ShapesDataset(os.path.join(workdir, "train.npz"), train=True, fixed=args.fixed)
    val_ds = ShapesDataset(os.path.join(workdir, "val.npz"), train=False, fixed=args.fixed)
    train_loader = DataLoader(train_ds, batch_size=64, shuffle=True, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=200)

    model = SmallResNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=args.epochs * len(train_loader))
    t0 = time.time()
    for epoch in range(args.epochs):
        model.train()
        running = 0.0
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y, label_smoothing=0.05)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            running += loss.item()
        acc = evaluate(model, val_loader)
        torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(), "val_acc": acc},
                   os.path.join(workdir, f"ckpt_{epoch:03d}.pt"))
        print(f"epoch {epoch} loss {running / len(train_loader):.3f} val_acc {acc:.3f} "
              f"[{time.time() - t0:.1f}s]")
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"total {time.time() - t_start:.1f}s")


if __name__ == "__main__":
    main()

"""Handwriting-like glyph classification (28x28 grey images, an MLP) with a Trainer whose
callbacks run at the start of each batch.

The augmentation callback applies a chain of transforms (reflect-pad and random crop, random
sharpening, brightness / contrast / gamma jitter, noise, cutout, normalisation) to every image
on its own with NumPy. --fixed applies the same transforms, with the same random parameters, to
the whole batch at once with torch."""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F

FIXED = False
MEAN, STD = 0.13, 0.31


def augment_one(img: np.ndarray, p: dict, i: int) -> np.ndarray:
    """One (C, H, W) float32 image; p holds the batch's random parameters, i selects this image's."""
    _, h, w = img.shape
    img = np.pad(img, ((0, 0), (2, 2), (2, 2)), mode="reflect")
    img = img[:, p["oy"][i]:p["oy"][i] + h, p["ox"][i]:p["ox"][i] + w]
    edge = np.pad(img, ((0, 0), (1, 1), (1, 1)), mode="edge")
    blur = sum(edge[:, dy:dy + h, dx:dx + w] for dy in range(3) for dx in range(3)) / np.float32(9)
    img = img + p["sharpness"][i] * (img - blur)
    img = img * p["brightness"][i]
    mean = img.mean()
    img = np.clip((img - mean) * p["contrast"][i] + mean, 0.0, 1.0)
    img = np.clip(img ** p["gamma"][i] + p["noise"][i], 0.0, 1.0)
    cy, cx = p["cy"][i], p["cx"][i]
    img[:, max(cy - 3, 0):cy + 3, max(cx - 3, 0):cx + 3] = 0.0
    return (img - np.float32(MEAN)) / np.float32(STD)


def augment_batch(x: torch.Tensor, p: dict) -> torch.Tensor:
    b, _, h, w = x.shape
    t = {k: torch.from_numpy(v) for k, v in p.items()}
    padded = F.pad(x, (2, 2, 2, 2), mode="reflect")
    rows = (t["oy"][:, None] + torch.arange(h))[:, :, None]
    cols = (t["ox"][:, None] + torch.arange(w))[:, None, :]
    x = padded[torch.arange(b)[:, None, None], :, rows, cols].permute(0, 3, 1, 2)
    edge = F.pad(x, (1, 1, 1, 1), mode="replicate")
    blur = sum(edge[..., dy:dy + h, dx:dx + w] for dy in range(3) for dx in range(3)) / 9
    x = x + t["sharpness"][:, None, None, None] * (x - blur)
    x = x * t["brightness"][:, None, None, None]
    mean = x.mean((1, 2, 3), keepdim=True)
    x = ((x - mean) * t["contrast"][:, None, None, None] + mean).clamp(0.0, 1.0)
    x = (x ** t["gamma"][:, None, None, None] + t["noise"]).clamp(0.0, 1.0)
    yy, xx = torch.arange(h)[None, :, None], torch.arange(w)[None, None, :]
    cut = ((yy >= t["cy"][:, None, None] - 3) & (yy < t["cy"][:, None, None] + 3)
           & (xx >= t["cx"][:, None, None] - 3) & (xx < t["cx"][:, None, None] + 3))
    return (x.masked_fill(cut[:, None], 0.0) - MEAN) / STD


class Callback:
    def on_batch_start(self, trainer: Trainer, batch: dict) -> None:
        pass

    def on_epoch_end(self, trainer: Trainer, epoch: int, logs: dict) -> None:
        pass


class Augment(Callback):
    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)

    def params(self, n: int, h: int, w: int) -> dict:
        r = self.rng
        return {"oy": r.integers(0, 5, n), "ox": r.integers(0, 5, n),
                "brightness": r.uniform(0.8, 1.2, n).astype(np.float32),
                "contrast": r.uniform(0.8, 1.2, n).astype(np.float32),
                "gamma": r.uniform(0.7, 1.4, n).astype(np.float32),
                "noise": r.normal(0.0, 0.05, (n, 1, h, w)).astype(np.float32),
                "cy": r.integers(0, h, n), "cx": r.integers(0, w, n),
                "sharpness": r.uniform(0.0, 1.0, n).astype(np.float32)}

    def on_batch_start(self, trainer, batch):
        x = batch["images"]
        p = self.params(len(x), x.shape[2], x.shape[3])
        if FIXED:
            batch["images"] = augment_batch(x, p)
        else:
            batch["images"] = torch.stack([torch.from_numpy(augment_one(img.numpy(), p, i))  # PLANTED
                                           for i, img in enumerate(x)])


class LogEpoch(Callback):
    def on_epoch_end(self, trainer, epoch, logs):
        print(f"epoch {epoch}: " + "  ".join(f"{k} {v:.4f}" for k, v in logs.items()))


class Trainer:
    def __init__(self, model: torch.nn.Module, callbacks: list[Callback], lr: float = 2e-3):
        self.model, self.callbacks = model, callbacks
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True)

    def fit(self, images: torch.Tensor, labels: torch.Tensor, epochs: int, batch_size: int = 256) -> None:
        g = torch.Generator().manual_seed(1)
        for epoch in range(epochs):
            self.model.train()
            order, total = torch.randperm(len(labels), generator=g), 0.0
            for start in range(0, len(order), batch_size):
                idx = order[start:start + batch_size]
                batch = {"images": images[idx], "labels": labels[idx]}
                for cb in self.callbacks:
                    cb.on_batch_start(self, batch)
                loss = F.cross_entropy(self.model(batch["images"]), batch["labels"])
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                total += loss.item() * len(idx)
            for cb in self.callbacks:
                cb.on_epoch_end(self, epoch, {"loss": total / len(labels)})


def glyphs(n: int, size: int = 28, seed: int = 0):
    """Ten classes of stroke patterns, jittered in position and thickness."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    angle = (labels.float() * 0.314)[:, None, None]
    shift = torch.randint(-3, 4, (2, n, 1, 1), generator=g)
    u = (xx - 14 - shift[0]) * torch.cos(angle) + (yy - 14 - shift[1]) * torch.sin(angle)
    v = -(xx - 14 - shift[0]) * torch.sin(angle) + (yy - 14 - shift[1]) * torch.cos(angle)
    strokes = ((v.abs() < 2) & (u.abs() < 9)) | ((labels[:, None, None] % 2 == 1) & (u.abs() < 2) & (v.abs() < 6))
    images = strokes.float()[:, None] * (0.7 + 0.3 * torch.rand(n, 1, 1, 1, generator=g))
    return (images + 0.1 * torch.rand(images.shape, generator=g)).clamp(0, 1), labels


def main() -> None:
    global FIXED
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--fixed", action="store_true", help="augment the whole batch with torch")
    args = ap.parse_args()
    FIXED = args.fixed
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    images, labels = glyphs(6144)
    Trainer(model, [Augment(), LogEpoch()]).fit(images, labels, args.epochs)


if __name__ == "__main__":
    main()

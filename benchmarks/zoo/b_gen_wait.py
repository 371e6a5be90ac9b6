"""Train a tiny CNN on image batches prepared by a background thread and consumed through generators.

A loader thread decodes and augments batches into a bounded queue; the training side reads them
with a polling generator, then a second generator stage normalises them.
"""
import argparse
import queue
import threading
import time
import zlib

import numpy as np
import torch
from torch import nn

POLL_S = 0.05


def make_shards(n_shards, per_shard, seed=0):
    """Shards of zlib-compressed 48x48 RGB images (shifted synthetic patterns, one per class) and labels."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:48, 0:48]
    patterns = [(127 + 120 * np.sin(xx[..., None] * (c + 1) / 9 + yy[..., None] / 7 + np.arange(3))).astype(np.uint8)
                for c in range(10)]
    shards = []
    for _ in range(n_shards):
        labels = rng.integers(0, 10, per_shard)
        shifts = rng.integers(0, 48, (per_shard, 2))
        blobs = [zlib.compress(np.roll(patterns[c], tuple(s), axis=(0, 1)).tobytes(), 1)
                 for c, s in zip(labels, shifts)]
        shards.append((blobs, labels))
    return shards


def loader_thread(shards, batch_size, q, seed=0):
    """Decode, random-crop, flip and jitter each image on the CPU, then hand the batch over."""
    rng = np.random.default_rng(seed)
    for blobs, labels in shards:
        for i in range(0, len(blobs), batch_size):
            batch = []
            for blob in blobs[i:i + batch_size]:
                img = np.frombuffer(zlib.decompress(blob), np.uint8).reshape(48, 48, 3)
                y0, x0 = rng.integers(0, 17, 2)
                crop = img[y0:y0 + 32, x0:x0 + 32].astype(np.float32)
                if rng.random() < 0.5:
                    crop = crop[:, ::-1]
                batch.append(np.clip(crop * rng.uniform(0.8, 1.2) + rng.normal(0, 4, crop.shape), 0, 255))
            q.put((np.stack(batch).transpose(0, 3, 1, 2).astype(np.uint8), labels[i:i + batch_size]))
    q.put(None)


def from_queue(q, fixed):
    """Yield batches as the loader thread produces them, until it sends None."""
    while True:
        if fixed:
            item = q.get()
        else:
            try:
                item = q.get_nowait()
            except queue.Empty:
                time.sleep(POLL_S)  # PLANTED
                continue
        if item is None:
            return
        yield item


def to_tensors(batches, mean=127.5, std=64.0):
    for images, labels in batches:
        yield (torch.from_numpy(images).float() - mean) / std, torch.from_numpy(labels)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--fixed", action="store_true", help="block on the queue instead of polling it")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                          nn.Flatten(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    q = queue.Queue(maxsize=2)
    threading.Thread(target=loader_thread, args=(make_shards(args.shards, 512), 32, q), daemon=True).start()
    t0 = time.perf_counter()
    for step, (x, y) in enumerate(to_tensors(from_queue(q, args.fixed))):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f} {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()

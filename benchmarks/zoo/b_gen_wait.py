"""Score an image collection with a small CNN: batches prepared by a background thread, consumed through generators.

A loader thread decodes and crops batches into a bounded queue; the scoring side reads them with a
polling generator, a second generator stage normalises them, and the predictions are tallied.
"""
import argparse
import queue
import threading
import time
import zlib

import numpy as np
import torch
from torch import nn

POLL_S = 0.1


def make_shards(n_shards, per_shard, seed=0):
    """Shards of zlib-compressed 128x128 RGB images (shifted synthetic patterns, one per class) and labels."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:128, 0:128]
    patterns = [(127 + 120 * np.sin(xx[..., None] * (c + 1) / 24 + yy[..., None] / 19 + np.arange(3))).astype(np.uint8)
                for c in range(10)]
    # the corpus holds every pattern at 64 shifts, each image stored once as a compressed blob
    blobs = {(c, s): zlib.compress(np.roll(patterns[c], (s, 3 * s), axis=(0, 1)).tobytes(), 1)
             for c in range(10) for s in range(64)}
    shards = []
    for _ in range(n_shards):
        labels = rng.integers(0, 10, per_shard)
        shifts = rng.integers(0, 64, per_shard)
        shards.append(([blobs[c, s] for c, s in zip(labels.tolist(), shifts.tolist())], labels))
    return shards


def loader_thread(shards, batch_size, q):
    """Decode each image, centre-crop it to 96x96 and subsample it to 32x32, then hand the batch over."""
    for blobs, labels in shards:
        for i in range(0, len(blobs), batch_size):
            batch = [np.frombuffer(zlib.decompress(blob), np.uint8).reshape(128, 128, 3)[16:112:3, 16:112:3]
                     for blob in blobs[i:i + batch_size]]
            q.put((np.stack(batch).transpose(0, 3, 1, 2).copy(), labels[i:i + batch_size]))
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
    ap.add_argument("--shards", type=int, default=12)
    ap.add_argument("--fixed", action="store_true", help="block on the queue instead of polling it")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                          nn.Flatten(), nn.Linear(256, 10)).eval()
    q = queue.Queue(maxsize=2)
    threading.Thread(target=loader_thread, args=(make_shards(args.shards, 512), 32, q), daemon=True).start()
    confusion = torch.zeros(10, 10, dtype=torch.long)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for step, (x, y) in enumerate(to_tensors(from_queue(q, args.fixed))):
            pred = model(x).argmax(1)
            confusion.index_put_((y, pred), torch.ones_like(y), accumulate=True)
            if step % 50 == 0:
                print(f"batch {step}: {confusion.sum()} images scored, {time.perf_counter() - t0:.1f}s")
    print(f"accuracy {confusion.diag().sum() / confusion.sum():.3f} over {confusion.sum()} images")


if __name__ == "__main__":
    main()

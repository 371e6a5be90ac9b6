"""Loading / preprocessing of multichannel sensor windows."""
import sys

import numpy as np
import torch
from torch.utils.data import Dataset, DataLoader

FIXED = "--fixed" in sys.argv

N_CHANNELS = 8
SEGMENT = 2048      # one labelled activity bout
WINDOW = 512        # classifier input
HOP = 64            # sliding-window stride inside a bout
N_CLASSES = 6


def synthesize_recordings(n_segments, seed=0):
    """Fake accelerometer/gyro bouts: class-dependent sinusoids + noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, N_CLASSES, size=n_segments)
    t = np.arange(SEGMENT, dtype=np.float32) / WINDOW
    freqs = (3.0 + labels[:, None, None] * 1.5).astype(np.float32) \
        + rng.normal(0, 0.4, (n_segments, N_CHANNELS, 1)).astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi, (n_segments, N_CHANNELS, 1)).astype(np.float32)
    x = np.sin(np.float32(2 * np.pi) * freqs * t[None, None, :] + phase)
    x += 0.8 * rng.standard_normal(x.shape, dtype=np.float32)
    gain = rng.uniform(0.5, 3.0, (1, N_CHANNELS, 1)).astype(np.float32)
    offset = rng.normal(0, 2, (1, N_CHANNELS, 1)).astype(np.float32)
    x = x * gain + offset
    return x, labels.astype(np.int64)


def standardize(train_x, *others):
    mean = train_x.mean(axis=(0, 2), keepdims=True)
    std = train_x.std(axis=(0, 2), keepdims=True) + 1e-6
    return [(a - mean) / std for a in (train_x, *others)]


class WindowDataset(Dataset):
    """Overlapping fixed-length windows cut from labelled bouts."""

    def __init__(self, bouts, labels):
        self.bouts = bouts
        self.labels = labels
        self.index = [(b, off) for b in range(len(bouts))
                      for off in range(0, SEGMENT - WINDOW + 1, HOP)]

    def __len__(self):
        return len(self.index)

    def __getitem__(self, idx):
        b, off = self.index[idx]
        return self.bouts[b, :, off:off + WINDOW], int(self.labels[b])


def collate_windows(samples):
    xs, ys = zip(*samples)
    if FIXED:
        x = torch.from_numpy(np.stack(xs))
    else:
        x = torch.tensor([s.tolist() for s in xs], dtype=torch.float32)  # PLANTED
    y = torch.tensor(ys, dtype=torch.long)
    return x, y


def make_loaders(n_train, n_test, batch_size, seed=0):
    """n_train / n_test are numbers of bouts; split by bout to avoid leakage."""
    x, y = synthesize_recordings(n_train + n_test, seed=seed)
    tr_x, te_x = standardize(x[:n_train], x[n_train:])
    del x
    train = DataLoader(WindowDataset(tr_x, y[:n_train]), batch_size=batch_size,
                       shuffle=False, collate_fn=collate_windows)
    test = DataLoader(WindowDataset(te_x, y[n_train:]), batch_size=batch_size,
                      shuffle=False, collate_fn=collate_windows)
    return train, test

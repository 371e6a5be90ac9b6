"""Sensor fleet feature extraction and similarity search (CPU, no training).

A small feature-engineering job for a fleet of vibration sensors.  Each
sensor produces a long 1-D signal.  The pipeline

  1. synthesises the raw recordings (numpy RNG, converted to float32 tensors),
  2. cuts every recording into overlapping windows (Tensor.unfold),
  3. computes a vector of statistics per window (moments, zero-crossing rate,
     least-squares slope, spectral band energies via rfft),
  4. pools window features into one descriptor per sensor,
  5. robust-scales the descriptors and runs a cosine top-k similarity search
     between all sensors,

and prints a checksum of the result.  The stages are small helpers chained
with generators from main().

Planted problem: in `featurize()` the window-statistics helper is applied
window by window through a Python list comprehension followed by
torch.stack, so ~a dozen tiny tensor ops are dispatched for every single
window (hundreds of thousands of calls in total), even though
`window_stats()` already reduces over the last dimension and accepts a whole
batch of windows.  With `--fixed` the helper is called once on the
(n_windows, window) tensor of each sensor, which computes the same numbers
with a handful of large vectorised ops.
"""

import sys
import time

import numpy as np
import torch

FIXED = "--fixed" in sys.argv

N_SENSORS = 64
SIGNAL_LEN = 24_000
WINDOW = 256
STEP = 16
BANDS = 8
TOP_K = 5


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------
def synth_recordings(n_sensors, length, seed=0):
    """Yield (sensor_id, float32 signal) pairs of synthetic vibration data."""
    rng = np.random.default_rng(seed)
    t = np.arange(length, dtype=np.float64) / 1000.0
    for sid in range(n_sensors):
        f0 = rng.uniform(5.0, 60.0)
        harmonics = sum(
            rng.uniform(0.1, 1.0) / h * np.sin(2 * np.pi * f0 * h * t + rng.uniform(0, 6.28))
            for h in range(1, 4)
        )
        drift = rng.normal(0.0, 0.002, size=length).cumsum()
        noise = rng.normal(0.0, rng.uniform(0.05, 0.4), size=length)
        bursts = (rng.random(length) < 0.001) * rng.normal(0.0, 3.0, size=length)
        sig = (harmonics + drift + noise + bursts).astype(np.float32)
        yield sid, torch.from_numpy(sig)


def sliding_windows(signal, size, step):
    """(L,) -> (n_windows, size) view of overlapping windows."""
    return signal.unfold(0, size, step)


# --------------------------------------------------------------------------
# per-window statistics (reduce over the last dimension)
# --------------------------------------------------------------------------
def _slope(w):
    n = w.shape[-1]
    x = torch.arange(n, dtype=w.dtype) - (n - 1) / 2.0
    return (w * x).sum(-1) / (x * x).sum()


def _band_energy(w, bands):
    spec = torch.fft.rfft(w - w.mean(-1, keepdim=True)).abs().pow(2)
    spec = spec[..., 1:]
    usable = (spec.shape[-1] // bands) * bands
    chunks = spec[..., :usable].unflatten(-1, (bands, -1)).sum(-1)
    return torch.log1p(chunks)


def window_stats(w):
    """Statistics of windows along the last dimension -> (..., 7 + BANDS)."""
    mean = w.mean(-1)
    centred = w - mean.unsqueeze(-1)
    var = centred.pow(2).mean(-1)
    std = var.clamp_min(1e-12).sqrt()
    z = centred / std.unsqueeze(-1)
    skew = z.pow(3).mean(-1)
    kurt = z.pow(4).mean(-1) - 3.0
    signs = torch.signbit(centred)
    zcr = (signs[..., 1:] != signs[..., :-1]).float().mean(-1)
    peak = w.abs().amax(-1)
    slope = _slope(w)
    bands = _band_energy(w, BANDS)
    scalars = torch.stack([mean, std, skew, kurt, zcr, peak, slope], dim=-1)
    return torch.cat([scalars, bands], dim=-1)


# --------------------------------------------------------------------------
# pipeline stages
# --------------------------------------------------------------------------
def windowed(stream, size, step):
    for sid, sig in stream:
        yield sid, sliding_windows(sig, size, step)


def featurize(stream):
    for sid, wins in stream:
        if FIXED:
            feats = window_stats(wins)
        else:
            feats = torch.stack([window_stats(w) for w in wins])  # PLANTED: per-window Python loop over an op that already batches
        yield sid, feats


def pool(stream):
    """Summarise the window features of one sensor: mean, std and 90th pct."""
    for sid, feats in stream:
        q = torch.quantile(feats, 0.9, dim=0)
        yield sid, torch.cat([feats.mean(0), feats.std(0), q])


def robust_scale(x):
    med = x.median(dim=0).values
    q1 = torch.quantile(x, 0.25, dim=0)
    q3 = torch.quantile(x, 0.75, dim=0)
    return (x - med) / (q3 - q1).clamp_min(1e-6)


def top_k_similar(desc, k):
    unit = torch.nn.functional.normalize(desc, dim=1)
    sim = unit @ unit.T
    sim.fill_diagonal_(-float("inf"))
    return sim.topk(k, dim=1)


def main():
    torch.manual_seed(0)
    t0 = time.perf_counter()
    stream = pool(featurize(windowed(synth_recordings(N_SENSORS, SIGNAL_LEN), WINDOW, STEP)))
    ids, descs = zip(*stream)
    desc = robust_scale(torch.stack(descs))
    scores, idx = top_k_similar(desc, TOP_K)
    elapsed = time.perf_counter() - t0

    print(f"sensors={len(ids)} descriptor_dim={desc.shape[1]}")
    for sid in ids[:3]:
        print(f"  sensor {sid:2d} -> {idx[sid].tolist()}")
    checksum = float(desc.abs().sum()) + float(scores.sum()) + float(idx.sum())
    print(f"pipeline time {elapsed:.2f}s")
    print(f"checksum {checksum:.3f}")


if __name__ == "__main__":
    main()

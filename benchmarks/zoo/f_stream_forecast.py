"""Streaming multi-sensor load forecaster built as a chain of generators.

raw ADC log (int16) -> sliding windows in physical units -> minibatches -> SGD updates -> logged losses
"""
import argparse
import collections
import itertools
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = False


def simulate_adc_log(n_channels=24, n_samples=150_000, seed=0):
    """Plant sensors sampled at 1 Hz, stored the way the data logger writes them: int16 counts."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n_samples, dtype=torch.float32)
    daily = torch.sin(2 * math.pi * t / 1440.0)
    phase = torch.rand(n_channels, 1, generator=g) * 6.28
    sig = daily[None] * torch.rand(n_channels, 1, generator=g) + 0.3 * torch.sin(t[None] / 37.0 + phase)
    sig = sig + 0.1 * torch.randn(n_channels, n_samples, generator=g).cumsum(1) / math.sqrt(n_samples) * 30
    sig = sig + 0.05 * torch.randn(n_channels, n_samples, generator=g)
    counts = (sig * 4000).round().clamp(-32768, 32767).to(torch.int16)
    scale = torch.full((n_channels, 1), 1.0 / 4000)
    offset = torch.zeros(n_channels, 1)
    return counts, scale, offset


def sliding_windows(counts, scale, offset, lookback, horizon, starts):
    """Yield (history, future-of-channel-0) pairs in physical units."""
    if FIXED:
        phys = (counts.float() - offset) * scale
    for s in starts:
        if not FIXED:
            phys = (counts.float() - offset) * scale  # PLANTED
        x = phys[:, s:s + lookback]
        y = phys[0, s + lookback:s + lookback + horizon]
        yield x, y


def minibatches(pairs, batch_size):
    while True:
        chunk = list(itertools.islice(pairs, batch_size))
        if len(chunk) < batch_size:
            return
        xs, ys = zip(*chunk)
        yield torch.stack(xs), torch.stack(ys)


def sgd_updates(model, opt, batches):
    model.train()
    for x, y in batches:
        last = x[:, :, -1:]
        pred = model(x - last)  # forecast relative to the last observation
        loss = F.smooth_l1_loss(pred, y - last[:, 0])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        yield loss.detach()


def log_progress(losses, every):
    ema = None
    for i, l in enumerate(losses):
        ema = l if ema is None else 0.95 * ema + 0.05 * l
        if i % every == 0:
            print(f"update {i:4d} loss(ema) {ema.item():.4f}")
        yield ema


class TCNForecaster(nn.Module):
    def __init__(self, n_channels, horizon, width=48):
        super().__init__()
        layers, c = [], n_channels
        for d in (1, 2, 4, 8):
            layers += [nn.Conv1d(c, width, 3, dilation=d, padding=d), nn.GELU()]
            c = width
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width * 8, horizon)

    def forward(self, x):
        h = self.body(x)[:, :, -8:]
        return self.head(h.flatten(1))


@torch.no_grad()
def holdout_mae(model, counts, scale, offset, lookback, horizon, starts):
    model.eval()
    errs = []
    for x, y in minibatches(sliding_windows(counts, scale, offset, lookback, horizon, starts), 64):
        last = x[:, :, -1:]
        errs.append((model(x - last) + last[:, 0] - y).abs().mean())
    return torch.stack(errs).mean().item()


def main():
    global FIXED
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--lookback", type=int, default=256)
    ap.add_argument("--horizon", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--updates", type=int, default=40)
    args = ap.parse_args()
    FIXED = args.fixed
    torch.manual_seed(0)

    counts, scale, offset = simulate_adc_log()
    n = counts.shape[1]
    split = int(n * 0.85)
    span = args.lookback + args.horizon
    g = torch.Generator().manual_seed(1)
    train_starts = torch.randint(0, split - span, (args.updates * args.batch_size,), generator=g).tolist()
    val_starts = list(range(split, n - span, 101))

    model = TCNForecaster(counts.shape[0], args.horizon)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    t0 = time.time()
    pipeline = log_progress(
        sgd_updates(model, opt, minibatches(
            sliding_windows(counts, scale, offset, args.lookback, args.horizon, train_starts),
            args.batch_size)),
        every=5)
    last = collections.deque(pipeline, maxlen=1)  # drain the stream
    print(f"final ema loss {last[0].item():.4f}")
    mae = holdout_mae(model, counts, scale, offset, args.lookback, args.horizon, val_starts)
    print(f"holdout MAE {mae:.4f}  ({time.time() - t0:.2f}s)")


if __name__ == "__main__":
    main()

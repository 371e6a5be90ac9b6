"""Multi-horizon load forecasting for a small fleet of substations.

Builds a synthetic multivariate hourly series (load + weather covariates),
trains a temporal-conv forecaster on sliding windows and runs a
rolling-origin backtest on the held-out tail of the series.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

LOOKBACK, HORIZON = 168, 24


def synth_series(n_hours, n_sites, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n_hours)
    daily = np.sin(2 * np.pi * t / 24)[:, None]
    weekly = np.sin(2 * np.pi * t / 168)[:, None]
    temp = 12 + 9 * np.sin(2 * np.pi * (t - 2000) / 8766)[:, None] + rng.normal(0, 2, (n_hours, 1))
    base = rng.uniform(50, 200, n_sites)
    load = base * (1 + 0.25 * daily + 0.1 * weekly) + 1.5 * np.abs(temp - 18) * rng.uniform(0.5, 1.5, n_sites)
    load += rng.normal(0, 3, (n_hours, n_sites)).cumsum(0) * 0.01
    calendar = np.stack([np.cos(2 * np.pi * t / 24), np.sin(2 * np.pi * t / 24),
                         np.cos(2 * np.pi * t / 168), np.sin(2 * np.pi * t / 168)], axis=1)
    return np.concatenate([load, temp, calendar], axis=1), n_sites


def robust_stats(x):
    q1, med, q3 = np.percentile(x, [25, 50, 75], axis=0)
    return med, (q3 - q1) + 1e-6


class WindowDataset(Dataset):
    """Sliding (lookback -> horizon) windows over rows [start, stop) of the series.

    Robust scaling statistics (median / IQR) always come from the training span [0, fit_end).
    """

    def __init__(self, values, n_targets, start, stop, fit_end, stride=1, fixed=False):
        self.values = values
        self.n_targets = n_targets
        self.fit_end = fit_end
        self.fixed = fixed
        self.origins = np.arange(start + LOOKBACK, stop - HORIZON + 1, stride)
        if fixed:
            self.center, self.spread = robust_stats(values[:fit_end])

    def __len__(self):
        return len(self.origins)

    def scale(self, window):
        if self.fixed:
            center, spread = self.center, self.spread
        else:
            center, spread = robust_stats(self.values[: self.fit_end])  # PLANTED
        return (window - center) / spread

    def __getitem__(self, i):
        o = self.origins[i]
        window = self.scale(self.values[o - LOOKBACK : o + HORIZON])
        past = torch.from_numpy(window[:LOOKBACK].astype(np.float32))
        future = torch.from_numpy(window[LOOKBACK:, : self.n_targets].astype(np.float32))
        return past.T.contiguous(), future.T.contiguous()


class TCNForecaster(nn.Module):
    def __init__(self, n_in, n_out, width=32):
        super().__init__()
        layers, ch = [], n_in
        for d in (1, 2, 4, 8):
            layers += [nn.Conv1d(ch, width, 3, dilation=d, padding=d), nn.GELU()]
            ch = width
        self.body = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool1d(8)
        self.head = nn.Linear(width * 8, n_out * HORIZON)
        self.n_out = n_out

    def forward(self, x):
        h = self.pool(self.body(x)).flatten(1)
        return self.head(h).view(-1, self.n_out, HORIZON)


def train(model, loader, epochs, lr):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, lr, total_steps=epochs * len(loader))
    for ep in range(epochs):
        model.train()
        total, n = 0.0, 0
        for past, future in loader:
            loss = nn.functional.smooth_l1_loss(model(past), future)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * past.size(0)
            n += past.size(0)
        print(f"epoch {ep} train loss {total / n:.4f}")


@torch.no_grad()
def backtest(model, dataset, batch_size=256):
    model.eval()
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False)
    abs_err = torch.zeros(HORIZON)
    naive_err = torch.zeros(HORIZON)
    count = 0
    for past, future in loader:
        pred = model(past)
        seasonal_naive = past[:, : future.size(1), -HORIZON:]
        abs_err += (pred - future).abs().mean(1).sum(0)
        naive_err += (seasonal_naive - future).abs().mean(1).sum(0)
        count += past.size(0)
    return abs_err / count, naive_err / count


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--hours", type=int, default=24 * 365 * 2)
    ap.add_argument("--sites", type=int, default=12)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()

    torch.manual_seed(0)
    values, n_sites = synth_series(args.hours, args.sites)
    fit_end = int(0.85 * len(values)) // 24 * 24
    train_ds = WindowDataset(values, n_sites, 0, fit_end, fit_end, stride=24, fixed=args.fixed)
    test_ds = WindowDataset(values, n_sites, fit_end - LOOKBACK, len(values), fit_end, stride=HORIZON,
                            fixed=args.fixed)
    loader = DataLoader(train_ds, batch_size=32, shuffle=True, drop_last=True)
    print(f"series {values.shape}, train windows {len(train_ds)}, backtest origins {len(test_ds)}")

    model = TCNForecaster(values.shape[1], n_sites)
    t0 = time.perf_counter()
    train(model, loader, args.epochs, lr=3e-3)
    mae, naive = backtest(model, test_ds)
    print("MAE by lead (scaled):", " ".join(f"{v:.3f}" for v in mae[::6].tolist()))
    print(f"skill vs seasonal naive: {1 - mae.mean() / naive.mean():.3f}")
    print(f"elapsed {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()

"""Rolling-origin backtest of a small MLP forecaster on synthetic multi-series data.

For every forecast origin we fit a fresh model on all windows that end before
the origin (expanding window), forecast the next HORIZON steps for each series
and score the forecast against a seasonal-naive baseline.
"""
import argparse
import math
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

N_SERIES = 6
SERIES_LEN = 1500
SEASON = 24
LOOKBACK = 48
HORIZON = 12
FIRST_ORIGIN = 900
N_FOLDS = 10
FOLD_STEP = 50
EPOCHS = 10
BATCH_SIZE = 1024
LR = 3e-3


def make_series(n_series, length, season, seed=0):
    """Trend + two seasonalities + AR(1) noise, one row per series."""
    rng = np.random.default_rng(seed)
    t = np.arange(length, dtype=np.float32)
    out = np.empty((n_series, length), dtype=np.float32)
    for i in range(n_series):
        level = rng.uniform(5.0, 20.0)
        slope = rng.uniform(-0.002, 0.004)
        amp_d = rng.uniform(1.0, 3.0)
        amp_w = rng.uniform(0.3, 1.0)
        phase = rng.uniform(0, 2 * math.pi)
        eps = rng.normal(0.0, 0.4, size=length)
        ar = np.zeros(length)
        for k in range(1, length):
            ar[k] = 0.6 * ar[k - 1] + eps[k]
        out[i] = (level + slope * t
                  + amp_d * np.sin(2 * math.pi * t / season + phase)
                  + amp_w * np.sin(2 * math.pi * t / (season * 7))
                  + ar).astype(np.float32)
    return torch.from_numpy(out)


def calendar_features(start, n, season):
    """Hour-of-day sin/cos for n consecutive steps starting at each `start`."""
    t = start.unsqueeze(-1) + torch.arange(n)
    ang = 2 * math.pi * (t % season).float() / season
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)


def make_windows(series, end, lookback, horizon):
    """All (input, calendar, target) windows whose target lies strictly before `end`."""
    usable = series[:, :end]
    win = usable.unfold(1, lookback + horizon, 1)           # (S, W, L+H)
    n_series, n_win = win.shape[:2]
    win = win.reshape(-1, lookback + horizon)
    starts = (torch.arange(n_win) + lookback).repeat(n_series)
    cal = calendar_features(starts, horizon, SEASON)
    return win[:, :lookback].contiguous(), cal, win[:, lookback:].contiguous()


def fit_scaler(series, end):
    hist = series[:, :end]
    mu = hist.mean(dim=1, keepdim=True)
    sd = hist.std(dim=1, keepdim=True).clamp_min(1e-3)
    return mu, sd


class MLPForecaster(nn.Module):
    def __init__(self, lookback, horizon, hidden=48):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(lookback + 2 * horizon, hidden),
            nn.GELU(),
            nn.Linear(hidden, hidden),
            nn.GELU(),
            nn.Linear(hidden, horizon),
        )
        self.skip = nn.Linear(lookback, horizon)

    def forward(self, x, cal):
        last = x[:, -1:]
        h = torch.cat([x - last, cal], dim=1)
        return last + self.net(h) + self.skip(x - last)


def make_loader(x, cal, y, batch_size, fixed):
    ds = TensorDataset(x, cal, y)
    if fixed:
        # Let the sampler hand out whole index batches; TensorDataset slices them at once.
        sampler = BatchSampler(RandomSampler(ds), batch_size=batch_size, drop_last=False)
        return DataLoader(ds, sampler=sampler, batch_size=None)
    return DataLoader(ds, batch_size=batch_size, shuffle=True)  # PLANTED


def train_model(x, cal, y, fixed):
    model = MLPForecaster(LOOKBACK, HORIZON)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    loader = make_loader(x, cal, y, BATCH_SIZE, fixed)
    loss_fn = nn.SmoothL1Loss()
    model.train()
    last_epoch_loss = float("nan")
    for epoch in range(EPOCHS):
        tot = torch.zeros(())
        n = 0
        for xb, cb, yb in loader:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb, cb), yb)
            loss.backward()
            opt.step()
            tot += loss.detach() * xb.shape[0]
            n += xb.shape[0]
        last_epoch_loss = float(tot) / n
    return model, last_epoch_loss


def forecast(model, series_norm, origin):
    model.eval()
    with torch.no_grad():
        ctx = series_norm[:, origin - LOOKBACK:origin]
        cal = calendar_features(torch.full((ctx.shape[0],), origin), HORIZON, SEASON)
        return model(ctx, cal)


def score(pred, actual, hist):
    mae = (pred - actual).abs().mean()
    # MASE denominator: in-sample seasonal-naive error
    scale = (hist[:, SEASON:] - hist[:, :-SEASON]).abs().mean()
    smape = (2 * (pred - actual).abs() / (pred.abs() + actual.abs() + 1e-8)).mean()
    return float(mae), float(mae / scale), float(smape)


def seasonal_naive(series, origin):
    reps = math.ceil(HORIZON / SEASON)
    last = series[:, origin - SEASON:origin].repeat(1, reps)
    return last[:, :HORIZON]


def backtest(series, fixed):
    rows = []
    for fold in range(N_FOLDS):
        origin = FIRST_ORIGIN + fold * FOLD_STEP
        mu, sd = fit_scaler(series, origin)
        norm = (series - mu) / sd
        x, cal, y = make_windows(norm, origin, LOOKBACK, HORIZON)
        t0 = time.perf_counter()
        model, train_loss = train_model(x, cal, y, fixed)
        fit_s = time.perf_counter() - t0
        pred = forecast(model, norm, origin) * sd + mu
        actual = series[:, origin:origin + HORIZON]
        mae, mase, smape = score(pred, actual, series[:, :origin])
        b_mae, b_mase, b_smape = score(seasonal_naive(series, origin), actual,
                                       series[:, :origin])
        rows.append((origin, len(x), train_loss, mae, mase, smape, b_mae, b_mase, fit_s))
    return rows


def report(rows):
    print(f"{'origin':>6} {'n_win':>6} {'loss':>8} {'MAE':>7} {'MASE':>6} "
          f"{'sMAPE':>6} {'nMAE':>7} {'nMASE':>6} {'fit_s':>6}")
    for r in rows:
        print(f"{r[0]:>6d} {r[1]:>6d} {r[2]:>8.4f} {r[3]:>7.4f} {r[4]:>6.3f} "
              f"{r[5]:>6.4f} {r[6]:>7.4f} {r[7]:>6.3f} {r[8]:>6.2f}")
    arr = np.array([r[3:8] for r in rows])
    m = arr.mean(axis=0)
    print(f"mean  MAE={m[0]:.4f} MASE={m[1]:.3f} sMAPE={m[2]:.4f} | "
          f"naive MAE={m[3]:.4f} MASE={m[4]:.3f}")
    skill = 1.0 - m[0] / m[3]
    print(f"skill vs seasonal-naive: {skill:+.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    series = make_series(N_SERIES, SERIES_LEN, SEASON)
    t0 = time.perf_counter()
    rows = backtest(series, args.fixed)
    report(rows)
    print(f"backtest wall: {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()

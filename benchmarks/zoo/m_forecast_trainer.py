"""Multivariate load forecaster trained with a small callback-driven Trainer.

A synthetic multi-sensor time series (hourly electricity load plus weather-like
covariates) is generated with a fixed seed.  A `StandardScaler` is fitted on the
training part, a `WindowDataset` cuts (lookback -> horizon) windows out of the
series, and a GRU encoder + linear head forecasts the next `horizon` values of
the load column.  Training is driven by a `Trainer` object that fires callbacks
(loss history, LR-on-plateau, early stopping, checkpoint-in-memory) at the end
of each batch/epoch.  Validation MAE (in original units) is printed at the end.

Planted problem:
    `WindowDataset.__getitem__` (the line `scaled = self.scaler.transform(self.raw)`)
    standardises the *whole* series on every item access and then slices one
    window out of it.  The scaled series never changes, so each sample pays for
    a full (T x F) numpy transform + torch conversion instead of a cheap slice;
    with ~10k items per epoch this dominates the run time.

Fix (--fixed):
    The dataset standardises the series once in `__init__` and `__getitem__`
    only slices the pre-scaled tensor (identical values).
"""
import argparse
import copy
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


# --------------------------------------------------------------------------- data
def make_series(n_steps: int, seed: int = 0) -> np.ndarray:
    """Hourly load with daily/weekly seasonality driven by temperature etc."""
    rng = np.random.default_rng(seed)
    t = np.arange(n_steps, dtype=np.float64)
    day = 2 * np.pi * t / 24.0
    week = 2 * np.pi * t / (24.0 * 7)
    temp = 12 + 8 * np.sin(day - 1.0) + 5 * np.sin(2 * np.pi * t / (24 * 365)) + rng.normal(0, 1.0, n_steps)
    humid = 60 + 15 * np.cos(day) + rng.normal(0, 3.0, n_steps)
    wind = np.abs(rng.normal(4, 2, n_steps)).cumsum() % 17
    solar = np.clip(np.sin(day - np.pi / 2), 0, None) * (800 + rng.normal(0, 50, n_steps))
    holiday = (rng.random(n_steps) < 0.01).astype(np.float64)
    price = 40 + 0.02 * np.cumsum(rng.normal(0, 1, n_steps))
    hour_sin, hour_cos = np.sin(day), np.cos(day)
    load = (500 + 120 * np.sin(day - 2.0) + 60 * np.sin(week) + 6 * np.abs(temp - 18)
            - 0.05 * solar - 80 * holiday + rng.normal(0, 10, n_steps))
    dow = np.eye(7)[(t // 24).astype(np.int64) % 7]            # day-of-week one-hot
    cols = [load, temp, humid, wind, solar, holiday, price, hour_sin, hour_cos]
    return np.concatenate([np.stack(cols, axis=1), dow], axis=1).astype(np.float32)


class StandardScaler:
    def fit(self, x: np.ndarray) -> "StandardScaler":
        self.mean_ = x.mean(axis=0)
        self.std_ = x.std(axis=0) + 1e-6
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean_) / self.std_).astype(np.float32)

    def inverse_col(self, y: torch.Tensor, col: int) -> torch.Tensor:
        return y * float(self.std_[col]) + float(self.mean_[col])


class WindowDataset(Dataset):
    def __init__(self, raw: np.ndarray, scaler: StandardScaler, lookback: int,
                 horizon: int, target_col: int = 0, prescale: bool = False):
        self.raw = raw
        self.scaler = scaler
        self.lookback = lookback
        self.horizon = horizon
        self.target_col = target_col
        self.prescaled = torch.from_numpy(scaler.transform(raw)) if prescale else None

    def __len__(self) -> int:
        return len(self.raw) - self.lookback - self.horizon + 1

    def __getitem__(self, i: int):
        if self.prescaled is not None:
            scaled = self.prescaled
        else:
            scaled = torch.from_numpy(self.scaler.transform(self.raw))  # PLANTED
        x = scaled[i:i + self.lookback]
        y = scaled[i + self.lookback:i + self.lookback + self.horizon, self.target_col]
        return x, y


# -------------------------------------------------------------------------- model
class GRUForecaster(nn.Module):
    def __init__(self, n_features: int, hidden: int, horizon: int):
        super().__init__()
        self.inp = nn.Linear(n_features, hidden)
        self.gru = nn.GRU(hidden, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, horizon))

    def forward(self, x):
        h, _ = self.gru(torch.relu(self.inp(x)))
        return self.head(h[:, -1])


# ---------------------------------------------------------------------- callbacks
class Callback:
    def on_batch_end(self, trainer, loss: float): ...
    def on_epoch_end(self, trainer, epoch: int, train_loss: float, val_loss: float): ...


class History(Callback):
    def __init__(self):
        self.batch_losses, self.epochs = [], []

    def on_batch_end(self, trainer, loss):
        self.batch_losses.append(loss)

    def on_epoch_end(self, trainer, epoch, train_loss, val_loss):
        self.epochs.append((epoch, train_loss, val_loss))
        print(f"epoch {epoch:2d}  train {train_loss:.4f}  val {val_loss:.4f}  "
              f"lr {trainer.optimizer.param_groups[0]['lr']:.2e}", flush=True)


class ReduceLROnPlateau(Callback):
    def __init__(self, factor=0.5, patience=1):
        self.factor, self.patience, self.best, self.bad = factor, patience, float("inf"), 0

    def on_epoch_end(self, trainer, epoch, train_loss, val_loss):
        if val_loss < self.best - 1e-4:
            self.best, self.bad = val_loss, 0
        else:
            self.bad += 1
            if self.bad > self.patience:
                for g in trainer.optimizer.param_groups:
                    g["lr"] *= self.factor
                self.bad = 0


class BestCheckpoint(Callback):
    def __init__(self):
        self.best, self.state = float("inf"), None

    def on_epoch_end(self, trainer, epoch, train_loss, val_loss):
        if val_loss < self.best:
            self.best = val_loss
            self.state = copy.deepcopy(trainer.model.state_dict())


class EarlyStopping(Callback):
    def __init__(self, patience=3):
        self.patience, self.best, self.bad = patience, float("inf"), 0

    def on_epoch_end(self, trainer, epoch, train_loss, val_loss):
        if val_loss < self.best - 1e-4:
            self.best, self.bad = val_loss, 0
        else:
            self.bad += 1
            trainer.stop = self.bad >= self.patience


# ------------------------------------------------------------------------ trainer
class Trainer:
    def __init__(self, model, optimizer, loss_fn, callbacks):
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.callbacks = callbacks
        self.stop = False

    def _fire(self, name, *args):
        for cb in self.callbacks:
            getattr(cb, name)(self, *args)

    def train_epoch(self, loader) -> float:
        self.model.train()
        total, n = torch.zeros(()), 0
        for x, y in loader:
            self.optimizer.zero_grad(set_to_none=True)
            loss = self.loss_fn(self.model(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            total += loss.detach() * len(x)
            n += len(x)
            self._fire("on_batch_end", loss.detach())
        return (total / n).item()

    @torch.no_grad()
    def evaluate(self, loader) -> float:
        self.model.eval()
        total, n = torch.zeros(()), 0
        for x, y in loader:
            total += self.loss_fn(self.model(x), y) * len(x)
            n += len(x)
        return (total / n).item()

    def fit(self, train_loader, val_loader, epochs: int):
        for epoch in range(1, epochs + 1):
            tr = self.train_epoch(train_loader)
            va = self.evaluate(val_loader)
            self._fire("on_epoch_end", epoch, tr, va)
            if self.stop:
                print("early stopping")
                break


@torch.no_grad()
def validation_mae(model, loader, scaler, col):
    model.eval()
    err, n = 0.0, 0
    for x, y in loader:
        pred = scaler.inverse_col(model(x), col)
        true = scaler.inverse_col(y, col)
        err += (pred - true).abs().sum().item()
        n += y.numel()
    return err / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--steps", type=int, default=24 * 365 * 4 // 3)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()

    torch.set_num_threads(1)  # shared 2-core box: one intra-op thread per job
    torch.manual_seed(0)
    series = make_series(args.steps, seed=0)
    split = int(0.8 * len(series))
    scaler = StandardScaler().fit(series[:split])
    lookback, horizon = 36, 12

    train_ds = WindowDataset(series[:split], scaler, lookback, horizon, prescale=args.fixed)
    val_ds = WindowDataset(series[split - lookback:], scaler, lookback, horizon, prescale=args.fixed)
    g = torch.Generator().manual_seed(0)
    train_loader = DataLoader(train_ds, batch_size=512, shuffle=True, generator=g, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=512)

    model = GRUForecaster(series.shape[1], hidden=32, horizon=horizon)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=1e-4)
    history, ckpt = History(), BestCheckpoint()
    trainer = Trainer(model, opt, nn.SmoothL1Loss(),
                      [history, ReduceLROnPlateau(), ckpt, EarlyStopping(patience=3)])

    t0 = time.perf_counter()
    trainer.fit(train_loader, val_loader, args.epochs)
    model.load_state_dict(ckpt.state)
    mae = validation_mae(model, val_loader, scaler, 0)
    print(f"best val loss {ckpt.best:.4f}  val MAE {mae:.2f} load units  "
          f"({len(history.batch_losses)} steps, {time.perf_counter() - t0:.2f}s)")


if __name__ == "__main__":
    main()

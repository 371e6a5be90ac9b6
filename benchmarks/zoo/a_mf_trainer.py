"""Matrix factorisation for ratings with a Trainer class and callbacks.

Adam is built with foreach=False: the single-tensor loop runs about ten element-wise kernels
over each embedding table per step. --fixed uses the fused CPU implementation (one pass)."""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F

FIXED = False


class MatrixFactorization(torch.nn.Module):
    def __init__(self, users: int, items: int, dim: int = 32):
        super().__init__()
        self.user = torch.nn.Embedding(users, dim)
        self.item = torch.nn.Embedding(items, dim)
        self.user_bias = torch.nn.Embedding(users, 1)
        self.item_bias = torch.nn.Embedding(items, 1)
        for table in (self.user, self.item):
            torch.nn.init.normal_(table.weight, std=0.1)
        for table in (self.user_bias, self.item_bias):
            torch.nn.init.zeros_(table.weight)

    def forward(self, u, i):
        dot = (self.user(u) * self.item(i)).sum(1)
        return dot + self.user_bias(u).squeeze(1) + self.item_bias(i).squeeze(1) + 3.5


class Callback:
    def on_step_end(self, trainer: Trainer, step: int, loss: float) -> None:
        pass

    def on_epoch_end(self, trainer: Trainer, epoch: int, metrics: dict) -> None:
        pass


class RunningLoss(Callback):
    def __init__(self, every: int = 50):
        self.every, self.total, self.count = every, 0.0, 0

    def on_step_end(self, trainer, step, loss):
        self.total, self.count = self.total + loss, self.count + 1
        if step % self.every == 0:
            print(f"step {step}: train rmse {math.sqrt(self.total / self.count):.4f}")
            self.total, self.count = 0.0, 0


class EarlyStopping(Callback):
    def __init__(self, patience: int = 2):
        self.patience, self.best, self.bad = patience, float("inf"), 0

    def on_epoch_end(self, trainer, epoch, metrics):
        if metrics["val_rmse"] < self.best:
            self.best, self.bad = metrics["val_rmse"], 0
        else:
            self.bad += 1
            trainer.should_stop = self.bad >= self.patience


class Trainer:
    def __init__(self, model: torch.nn.Module, callbacks: list[Callback], batch_size: int = 1024):
        self.model, self.callbacks, self.batch_size = model, callbacks, batch_size
        self.should_stop = False
        if FIXED:
            self.optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, fused=True)
        else:
            self.optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, foreach=False)  # PLANTED

    def fit(self, train: tuple, val: tuple, epochs: int) -> None:
        users, items, ratings = train
        g = torch.Generator().manual_seed(0)
        step = 0
        for epoch in range(epochs):
            order = torch.randperm(len(ratings), generator=g)
            for start in range(0, len(order), self.batch_size):
                idx = order[start:start + self.batch_size]
                loss = F.mse_loss(self.model(users[idx], items[idx]), ratings[idx])
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                step += 1
                for cb in self.callbacks:
                    cb.on_step_end(self, step, loss.item())
            metrics = self.evaluate(val)
            print(f"epoch {epoch}: val rmse {metrics['val_rmse']:.4f}")
            for cb in self.callbacks:
                cb.on_epoch_end(self, epoch, metrics)
            if self.should_stop:
                break

    @torch.inference_mode()
    def evaluate(self, data: tuple) -> dict:
        users, items, ratings = data
        return {"val_rmse": F.mse_loss(self.model(users, items), ratings).sqrt().item()}


def synthetic_ratings(users: int, items: int, n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    taste, kind = torch.randn(users, 8, generator=g), torch.randn(items, 8, generator=g)
    u = torch.randint(0, users, (n,), generator=g)
    i = torch.randint(0, items, (n,), generator=g)
    r = (3.5 + (taste[u] * kind[i]).sum(1) * 0.4 + 0.3 * torch.randn(n, generator=g)).clamp(1, 5)
    return u, i, r


def main() -> None:
    global FIXED
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--fixed", action="store_true", help="fused Adam")
    args = ap.parse_args()
    FIXED = args.fixed
    torch.manual_seed(0)
    users, items, ratings = synthetic_ratings(60000, 30000, 120000)
    train = (users[:100000], items[:100000], ratings[:100000])
    val = (users[100000:], items[100000:], ratings[100000:])
    Trainer(MatrixFactorization(60000, 30000), [RunningLoss(), EarlyStopping()]).fit(train, val, args.epochs)


if __name__ == "__main__":
    main()

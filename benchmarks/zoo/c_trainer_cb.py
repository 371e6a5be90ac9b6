"""Tabular regression with a small Trainer class and callbacks (Keras/Lightning style)."""
import argparse
import math
import time

import torch
import torch.nn as nn


class Callback:
    def on_train_begin(self, trainer): pass
    def on_step_end(self, trainer, step, loss): pass
    def on_epoch_end(self, trainer, epoch, logs): pass
    def on_train_end(self, trainer): pass


class WarmupCosine(Callback):
    def __init__(self, base_lr, warmup, total):
        self.base_lr, self.warmup, self.total = base_lr, warmup, total

    def on_step_end(self, trainer, step, loss):
        if step < self.warmup:
            lr = self.base_lr * (step + 1) / self.warmup
        else:
            p = (step - self.warmup) / max(1, self.total - self.warmup)
            lr = 0.5 * self.base_lr * (1 + math.cos(math.pi * p))
        for g in trainer.optimizer.param_groups:
            g["lr"] = lr


class LossHistory(Callback):
    def __init__(self, every=50):
        self.every = every
        self.history = []

    def on_step_end(self, trainer, step, loss):
        if step % self.every == 0:
            self.history.append(loss.item())


class EpochPrinter(Callback):
    def on_epoch_end(self, trainer, epoch, logs):
        print(f"epoch {epoch}: train {logs['train']:.4f} val {logs['val']:.4f}")


class ResBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(2 * d, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        h = self.fc2(self.drop(torch.nn.functional.gelu(self.fc1(self.norm(x)))))
        return x + h


class TabularNet(nn.Module):
    def __init__(self, d_in, d=32, depth=6):
        super().__init__()
        self.inp = nn.Linear(d_in, d)
        self.blocks = nn.ModuleList([ResBlock(d) for _ in range(depth)])
        self.head = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 1))

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        return self.head(h).squeeze(-1)


class Trainer:
    def __init__(self, model, optimizer, loss_fn, callbacks=(), debug=True):
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.callbacks = list(callbacks)
        self.global_step = 0
        torch.autograd.set_detect_anomaly(debug)  # PLANTED

    def _emit(self, name, *args):
        for cb in self.callbacks:
            getattr(cb, name)(self, *args)

    def train_epoch(self, X, y, bs):
        self.model.train()
        perm = torch.randperm(len(X))
        total, n = 0.0, 0
        for i in range(0, len(X), bs):
            idx = perm[i:i + bs]
            xb, yb = X[idx], y[idx]
            pred = self.model(xb)
            loss = self.loss_fn(pred, yb)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            self._emit("on_step_end", self.global_step, loss.detach())
            self.global_step += 1
            total += loss.detach() * len(idx)
            n += len(idx)
        return (total / n).item()

    @torch.no_grad()
    def evaluate(self, X, y, bs=1024):
        self.model.eval()
        tot = 0.0
        for i in range(0, len(X), bs):
            tot += self.loss_fn(self.model(X[i:i + bs]), y[i:i + bs]).item() * len(X[i:i + bs])
        return tot / len(X)

    def fit(self, train, val, epochs, bs):
        self._emit("on_train_begin")
        for ep in range(epochs):
            tr = self.train_epoch(*train, bs)
            va = self.evaluate(*val)
            self._emit("on_epoch_end", ep, {"train": tr, "val": va})
        self._emit("on_train_end")


def make_data(n, d, seed):
    w = torch.randn(d, generator=torch.Generator().manual_seed(123)) / math.sqrt(d)
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    y = torch.sin(X @ w) + 0.1 * (X[:, 0] * X[:, 1]) + 0.05 * torch.randn(n, generator=g)
    return X, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--epochs", type=int, default=4)
    args = ap.parse_args()
    torch.manual_seed(0)
    X, y = make_data(24000, 32, 1)
    Xv, yv = make_data(4000, 32, 2)
    model = TabularNet(32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    bs = 64
    steps = args.epochs * math.ceil(len(X) / bs)
    hist = LossHistory()
    trainer = Trainer(model, opt, nn.functional.mse_loss,
                      callbacks=[WarmupCosine(1e-3, 100, steps), hist, EpochPrinter()],
                      debug=not args.fixed)
    t0 = time.time()
    trainer.fit((X, y), (Xv, yv), args.epochs, bs)
    print(f"done in {time.time() - t0:.2f}s, {len(hist.history)} logged losses")


if __name__ == "__main__":
    main()

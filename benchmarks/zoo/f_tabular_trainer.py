"""Tabular click-through model trained with a small callback-driven Trainer.

The whole feature matrix lives in memory as one tensor; batches are gathered
with random index tensors each step.
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def build_dataset(n_rows, n_feat, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_feat), dtype=np.float32)
    w = rng.standard_normal((n_feat,), dtype=np.float32) / math.sqrt(n_feat)
    logits = X @ w + 0.5 * np.tanh(X[:, :8]).sum(1)
    y = (logits + 0.3 * rng.standard_normal(n_rows).astype(np.float32) > 0).astype(np.float32)
    return X, y


class Callback:
    def on_train_begin(self, trainer): pass
    def on_step_end(self, trainer, step, loss): pass
    def on_epoch_end(self, trainer, epoch): pass


class WarmupCosine(Callback):
    def __init__(self, warmup, total):
        self.warmup, self.total = warmup, total

    def on_step_end(self, trainer, step, loss):
        if step < self.warmup:
            scale = (step + 1) / self.warmup
        else:
            scale = 0.5 * (1 + math.cos(math.pi * (step - self.warmup) / (self.total - self.warmup)))
        for g in trainer.opt.param_groups:
            g["lr"] = trainer.base_lr * scale


class LossLogger(Callback):
    def __init__(self, every):
        self.every, self.running = every, []

    def on_step_end(self, trainer, step, loss):
        self.running.append(loss.detach())
        if (step + 1) % self.every == 0:
            print(f"  step {step + 1:4d} loss {torch.stack(self.running).mean().item():.4f}")
            self.running = []


class ValidationAUCProxy(Callback):
    def on_epoch_end(self, trainer, epoch):
        trainer.model.eval()
        with torch.no_grad():
            p = torch.sigmoid(trainer.model(trainer.X_val)).squeeze(-1)
            acc = ((p > 0.5).float() == trainer.y_val).float().mean().item()
        trainer.model.train()
        trainer.history.append(acc)
        print(f"epoch {epoch} val_acc {acc:.4f}")


class Trainer:
    def __init__(self, model, X, y, X_val, y_val, batch_size, lr, callbacks, fixed):
        self.model = model
        self.X = torch.from_numpy(X)
        if not fixed:
            # keep gradients w.r.t. inputs around for the feature-attribution notebook
            self.X.requires_grad_(True)  # PLANTED
        self.y = torch.from_numpy(y)
        self.X_val, self.y_val = torch.from_numpy(X_val), torch.from_numpy(y_val)
        self.batch_size = batch_size
        self.base_lr = lr
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
        self.callbacks = callbacks
        self.history = []
        self.gen = torch.Generator().manual_seed(1)

    def _emit(self, name, *args):
        for cb in self.callbacks:
            getattr(cb, name)(self, *args)

    def fit(self, epochs, steps_per_epoch):
        self._emit("on_train_begin")
        step = 0
        for epoch in range(epochs):
            for _ in range(steps_per_epoch):
                idx = torch.randint(0, self.X.shape[0], (self.batch_size,), generator=self.gen)
                xb, yb = self.X[idx], self.y[idx]
                loss = F.binary_cross_entropy_with_logits(self.model(xb).squeeze(-1), yb)
                self.opt.zero_grad(set_to_none=True)
                loss.backward()
                self.opt.step()
                self._emit("on_step_end", step, loss)
                step += 1
            self._emit("on_epoch_end", epoch)
        return self.history


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)

    n_feat = 128
    X_all, y_all = build_dataset(340_000, n_feat)
    X, y, Xv, yv = X_all[:320_000], y_all[:320_000], X_all[320_000:], y_all[320_000:]
    model = nn.Sequential(nn.Linear(n_feat, 256), nn.ReLU(), nn.Linear(256, 128),
                          nn.ReLU(), nn.Linear(128, 1))
    epochs, spe = 3, 18
    cbs = [WarmupCosine(warmup=10, total=epochs * spe), LossLogger(every=18), ValidationAUCProxy()]
    trainer = Trainer(model, X, y, Xv, yv, batch_size=512, lr=3e-3, callbacks=cbs, fixed=args.fixed)
    t0 = time.perf_counter()
    hist = trainer.fit(epochs, spe)
    print(f"train time {time.perf_counter() - t0:.2f}s final val_acc {hist[-1]:.4f}")


if __name__ == "__main__":
    main()

"""Small Trainer with a callback system, training a tabular classifier.

Callbacks: linear LR warm-up, a representation monitor that collects the
penultimate-layer features through a forward hook and reports their
effective rank once per epoch (to catch representation collapse), and a
console logger.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Callback:
    def on_train_start(self, trainer): pass
    def on_epoch_start(self, trainer, epoch): pass
    def on_batch_end(self, trainer, step, loss): pass
    def on_epoch_end(self, trainer, epoch, logs): pass


class WarmupLR(Callback):
    def __init__(self, warmup_steps, base_lr):
        self.warmup_steps, self.base_lr = warmup_steps, base_lr

    def on_batch_end(self, trainer, step, loss):
        scale = min(1.0, (step + 1) / self.warmup_steps)
        for g in trainer.optimizer.param_groups:
            g["lr"] = self.base_lr * scale


class RepresentationMonitor(Callback):
    """Collects features of `layer` during the epoch and logs their effective rank."""

    def __init__(self, layer, fixed=False):
        self.layer, self.fixed = layer, fixed
        self.handle = None

    def on_train_start(self, trainer):
        self.handle = self.layer.register_forward_hook(self._hook)

    def on_epoch_start(self, trainer, epoch):
        self.chunks = []
        self.feats = torch.empty(0, self.layer.out_features)

    def _hook(self, module, inputs, output):
        if not module.training:
            return
        if self.fixed:
            self.chunks.append(output.detach())
        else:
            self.feats = torch.cat([self.feats, output.detach()])  # PLANTED

    def on_epoch_end(self, trainer, epoch, logs):
        feats = torch.cat(self.chunks) if self.fixed else self.feats
        feats = feats - feats.mean(0)
        s = torch.linalg.svdvals(feats[::8])
        p = s / s.sum()
        logs["eff_rank"] = math.exp(-(p * p.clamp_min(1e-12).log()).sum().item())
        logs["n_feats"] = feats.shape[0]


class ConsoleLogger(Callback):
    def on_epoch_end(self, trainer, epoch, logs):
        msg = "  ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in logs.items())
        print(f"epoch {epoch}: {msg}")


class Trainer:
    def __init__(self, model, optimizer, callbacks=(), batch_size=64):
        self.model, self.optimizer = model, optimizer
        self.callbacks = list(callbacks)
        self.batch_size = batch_size
        self.global_step = 0

    def _emit(self, name, *args):
        for cb in self.callbacks:
            getattr(cb, name)(self, *args)

    def _batches(self, X, y, shuffle):
        idx = torch.randperm(len(X)) if shuffle else torch.arange(len(X))
        for i in range(0, len(X), self.batch_size):
            j = idx[i:i + self.batch_size]
            yield X[j], y[j]

    def evaluate(self, X, y):
        self.model.eval()
        with torch.no_grad():
            logits = self.model(X)
        self.model.train()
        return (logits.argmax(1) == y).float().mean().item()

    def fit(self, X, y, X_val, y_val, epochs):
        self._emit("on_train_start")
        for epoch in range(epochs):
            self._emit("on_epoch_start", epoch)
            total, n = 0.0, 0
            for xb, yb in self._batches(X, y, shuffle=True):
                loss = F.cross_entropy(self.model(xb), yb)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                total += loss.item() * len(xb)
                n += len(xb)
                self._emit("on_batch_end", self.global_step, loss)
                self.global_step += 1
            logs = {"train_loss": total / n, "val_acc": self.evaluate(X_val, y_val)}
            self._emit("on_epoch_end", epoch, logs)


def make_data(n, n_features=32, n_classes=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(n_classes, n_features, generator=g) * 2.0
    y = torch.randint(0, n_classes, (n,), generator=g)
    X = centers[y] + torch.randn(n, n_features, generator=g) * 2.5
    return X, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--n-train", type=int, default=30000)
    args = ap.parse_args()
    torch.manual_seed(0)

    X, y = make_data(args.n_train + 5000)
    X_tr, y_tr, X_val, y_val = X[:args.n_train], y[:args.n_train], X[args.n_train:], y[args.n_train:]
    model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
    callbacks = [WarmupLR(200, 2e-3), RepresentationMonitor(model[2], fixed=args.fixed), ConsoleLogger()]
    trainer = Trainer(model, opt, callbacks, batch_size=64)
    t0 = time.perf_counter()
    trainer.fit(X_tr, y_tr, X_val, y_val, epochs=args.epochs)
    print(f"trained {trainer.global_step} steps in {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()

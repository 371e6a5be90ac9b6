"""Train an MLP classifier on (synthetic) tabular telemetry with a small
callback-driven Trainer: cosine LR schedule, EMA of weights, and an
epoch-level calibration monitor (ECE / NLL on the training stream).

    python tabular_trainer_calibration.py --epochs 2
"""
import argparse
import logging
import math
import time
from typing import Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

log = logging.getLogger("trainer")


# --------------------------------------------------------------------------- #
# Data / model
# --------------------------------------------------------------------------- #
def make_dataset(n: int, n_features: int, n_classes: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(n_classes, n_features, generator=g) * 1.5
    y = torch.randint(0, n_classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, n_features, generator=g) * 2.0
    # a few heavy-tailed "counter" columns, log-scaled like in the real pipeline
    x[:, :8] = torch.log1p(x[:, :8].abs() * 10.0)
    return x, y


class MLP(nn.Module):
    def __init__(self, n_in: int, hidden: int, n_out: int, depth: int = 3, p_drop: float = 0.1):
        super().__init__()
        layers: List[nn.Module] = [nn.BatchNorm1d(n_in)]
        d = n_in
        for _ in range(depth):
            layers += [nn.Linear(d, hidden), nn.SiLU(), nn.Dropout(p_drop)]
            d = hidden
        layers.append(nn.Linear(d, n_out))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


# --------------------------------------------------------------------------- #
# Metrics helpers
# --------------------------------------------------------------------------- #
def expected_calibration_error(probs: torch.Tensor, targets: torch.Tensor, n_bins: int = 15) -> float:
    conf, pred = probs.max(dim=1)
    correct = pred.eq(targets).float()
    bins = torch.clamp((conf * n_bins).long(), max=n_bins - 1)
    count = torch.bincount(bins, minlength=n_bins).float()
    conf_sum = torch.bincount(bins, weights=conf, minlength=n_bins)
    acc_sum = torch.bincount(bins, weights=correct, minlength=n_bins)
    gap = (conf_sum - acc_sum).abs()
    return (gap.sum() / count.sum()).item()


# --------------------------------------------------------------------------- #
# Callbacks
# --------------------------------------------------------------------------- #
class Callback:
    def on_train_start(self, trainer): ...
    def on_epoch_start(self, trainer, epoch: int): ...
    def on_batch_end(self, trainer, step: int, out: Dict[str, torch.Tensor]): ...
    def on_epoch_end(self, trainer, epoch: int): ...


class CosineLR(Callback):
    def __init__(self, base_lr: float, warmup: int = 100, min_ratio: float = 0.05):
        self.base_lr, self.warmup, self.min_ratio = base_lr, warmup, min_ratio

    def on_batch_end(self, trainer, step, out):
        total = trainer.total_steps
        if step < self.warmup:
            f = (step + 1) / self.warmup
        else:
            t = (step - self.warmup) / max(1, total - self.warmup)
            f = self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + math.cos(math.pi * t))
        for group in trainer.optimizer.param_groups:
            group["lr"] = self.base_lr * f


class EMA(Callback):
    def __init__(self, decay: float = 0.995):
        self.decay = decay
        self.shadow: Optional[nn.Module] = None

    def on_train_start(self, trainer):
        self.shadow = MLP(**trainer.model_kwargs)
        self.shadow.load_state_dict(trainer.model.state_dict())
        self.shadow.eval().requires_grad_(False)

    @torch.no_grad()
    def on_batch_end(self, trainer, step, out):
        for e, p in zip(self.shadow.parameters(), trainer.model.parameters()):
            e.lerp_(p, 1.0 - self.decay)
        for e, b in zip(self.shadow.buffers(), trainer.model.buffers()):
            e.copy_(b)


class CalibrationMonitor(Callback):
    """Accumulates the training-stream predictions of an epoch and reports
    ECE / NLL / accuracy at the end of it."""

    def __init__(self, fixed: bool = False):
        self.fixed = fixed
        self.history: List[Dict[str, float]] = []

    def on_epoch_start(self, trainer, epoch):
        self.probs = torch.empty(0, trainer.n_classes)
        self.targets = torch.empty(0, dtype=torch.long)
        self._p, self._t = [], []

    def on_batch_end(self, trainer, step, out):
        p = out["logits"].detach().softmax(dim=1)
        if self.fixed:
            self._p.append(p)
            self._t.append(out["targets"])
        else:
            self.probs = torch.cat([self.probs, p])  # PLANTED
            self.targets = torch.cat([self.targets, out["targets"]])

    def on_epoch_end(self, trainer, epoch):
        if self.fixed:
            self.probs, self.targets = torch.cat(self._p), torch.cat(self._t)
        nll = F.nll_loss(self.probs.clamp_min(1e-12).log(), self.targets).item()
        acc = self.probs.argmax(1).eq(self.targets).float().mean().item()
        ece = expected_calibration_error(self.probs, self.targets)
        self.history.append({"epoch": epoch, "nll": nll, "acc": acc, "ece": ece})
        log.info("epoch %d train-stream: nll=%.4f acc=%.4f ece=%.4f", epoch, nll, acc, ece)


# --------------------------------------------------------------------------- #
# Trainer
# --------------------------------------------------------------------------- #
class Trainer:
    def __init__(self, model_kwargs, x, y, *, batch_size, epochs, lr, weight_decay,
                 callbacks: List[Callback], seed: int = 0):
        torch.manual_seed(seed)
        self.model_kwargs = model_kwargs
        self.model = MLP(**model_kwargs)
        self.n_classes = model_kwargs["n_out"]
        self.x, self.y = x, y
        self.batch_size, self.epochs = batch_size, epochs
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr,
                                           weight_decay=weight_decay)
        self.callbacks = callbacks
        self.steps_per_epoch = math.ceil(len(x) / batch_size)
        self.total_steps = self.steps_per_epoch * epochs
        self.global_step = 0

    def _emit(self, hook, *args):
        for cb in self.callbacks:
            getattr(cb, hook)(self, *args)

    def train_step(self, xb, yb):
        logits = self.model(xb)
        loss = F.cross_entropy(logits, yb, label_smoothing=0.05)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 2.0)
        self.optimizer.step()
        return {"loss": loss.detach(), "logits": logits, "targets": yb}

    def fit(self):
        self.model.train()
        self._emit("on_train_start")
        for epoch in range(self.epochs):
            self._emit("on_epoch_start", epoch)
            perm = torch.randperm(len(self.x))
            running = torch.zeros(())
            for idx in perm.split(self.batch_size):
                out = self.train_step(self.x[idx], self.y[idx])
                running += out["loss"]
                self._emit("on_batch_end", self.global_step, out)
                self.global_step += 1
            log.info("epoch %d mean loss %.4f", epoch, (running / self.steps_per_epoch).item())
            self._emit("on_epoch_end", epoch)

    @torch.no_grad()
    def evaluate(self, model, x, y):
        model.eval()
        logits = torch.cat([model(xb) for xb in x.split(4096)])
        return F.cross_entropy(logits, y).item(), logits.argmax(1).eq(y).float().mean().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-train", type=int, default=60_000)
    ap.add_argument("--n-val", type=int, default=10_000)
    ap.add_argument("--features", type=int, default=64)
    ap.add_argument("--classes", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fixed", action="store_true", help="use the corrected variant")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    torch.manual_seed(args.seed)
    x, y = make_dataset(args.n_train + args.n_val, args.features, args.classes, args.seed)
    xtr, ytr, xva, yva = x[:args.n_train], y[:args.n_train], x[args.n_train:], y[args.n_train:]

    ema, calib = EMA(0.995), CalibrationMonitor(fixed=args.fixed)
    trainer = Trainer(dict(n_in=args.features, hidden=args.hidden, n_out=args.classes),
                      xtr, ytr, batch_size=args.batch_size, epochs=args.epochs, lr=args.lr,
                      weight_decay=1e-4, callbacks=[CosineLR(args.lr), ema, calib],
                      seed=args.seed)
    t0 = time.perf_counter()
    trainer.fit()
    train_s = time.perf_counter() - t0

    val_loss, val_acc = trainer.evaluate(trainer.model, xva, yva)
    ema_loss, ema_acc = trainer.evaluate(ema.shadow, xva, yva)
    last = calib.history[-1]
    log.info("trained %d steps in %.2fs", trainer.global_step, train_s)
    print(f"val_loss={val_loss:.5f} val_acc={val_acc:.4f} ema_val_loss={ema_loss:.5f} "
          f"ema_val_acc={ema_acc:.4f} train_ece={last['ece']:.5f}")


if __name__ == "__main__":
    main()

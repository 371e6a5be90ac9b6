"""Credit-risk tier classifier trained with a small callback-driven Trainer."""
import argparse
import copy
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------- data
def make_loans(n, n_num=24, n_tiers=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x_num = torch.randn(n, n_num, generator=g)
    employer = torch.randint(0, 300, (n,), generator=g)
    purpose = torch.randint(0, 14, (n,), generator=g)
    w = torch.randn(n_num, n_tiers, generator=g) * 0.5
    emp_eff = torch.randn(300, n_tiers, generator=g) * 0.3
    pur_eff = torch.randn(14, n_tiers, generator=g) * 0.5
    logits = x_num @ w + emp_eff[employer] + pur_eff[purpose]
    tier = torch.distributions.Categorical(logits=logits * 2).sample()
    return x_num, employer, purpose, tier


def batches(tensors, batch_size, shuffle, generator=None):
    n = tensors[0].shape[0]
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    for start in range(0, n, batch_size):
        idx = order[start:start + batch_size]
        yield tuple(t[idx] for t in tensors)


# ----------------------------------------------------------------------------- model
class RiskNet(nn.Module):
    def __init__(self, n_num, n_tiers=4):
        super().__init__()
        self.employer = nn.Embedding(300, 12)
        self.purpose = nn.Embedding(14, 4)
        self.body = nn.Sequential(
            nn.Linear(n_num + 16, 64), nn.ReLU(),
            nn.Linear(64, 32), nn.ReLU(),
            nn.Linear(32, n_tiers),
        )

    def forward(self, x_num, employer, purpose):
        h = torch.cat([x_num, self.employer(employer), self.purpose(purpose)], dim=1)
        return self.body(h)


# ----------------------------------------------------------------------------- callbacks
class Callback:
    def on_fit_start(self, trainer): pass
    def on_epoch_start(self, trainer, epoch): pass
    def on_batch_end(self, trainer, phase, logits, target, loss): pass
    def on_epoch_end(self, trainer, epoch, logs): pass


class ConfusionMatrixTracker(Callback):
    """Accumulates a per-phase confusion matrix and per-class log-loss."""

    def __init__(self, n_classes, fixed=False):
        self.k = n_classes
        self.fixed = fixed

    def on_epoch_start(self, trainer, epoch):
        self.cm = {"train": torch.zeros(self.k, self.k, dtype=torch.long),
                   "val": torch.zeros(self.k, self.k, dtype=torch.long)}
        self.nll = {"train": torch.zeros(self.k, dtype=torch.float64),
                    "val": torch.zeros(self.k, dtype=torch.float64)}

    def on_batch_end(self, trainer, phase, logits, target, loss):
        logp = F.log_softmax(logits.detach(), dim=1)
        pred = logp.argmax(dim=1)
        cm, nll = self.cm[phase], self.nll[phase]
        if self.fixed:
            cm += torch.bincount(target * self.k + pred, minlength=self.k * self.k).view(self.k, self.k)
            nll.index_add_(0, target, -logp.gather(1, target[:, None]).squeeze(1).double())
        else:
            for i in range(target.shape[0]):
                t, p = target[i].item(), pred[i].item()  # PLANTED
                cm[t, p] += 1
                nll[t] -= logp[i, t].item()

    def on_epoch_end(self, trainer, epoch, logs):
        for phase, cm in self.cm.items():
            cm = cm.double()
            logs[f"{phase}_acc"] = (cm.diag().sum() / cm.sum()).item()
            logs[f"{phase}_macro_recall"] = (cm.diag() / cm.sum(1).clamp_min(1)).mean().item()
            logs[f"{phase}_class_nll"] = (self.nll[phase] / cm.sum(1).clamp_min(1)).tolist()


class CosineWithWarmup(Callback):
    def __init__(self, base_lr, warmup_epochs, total_epochs):
        self.base_lr, self.warmup, self.total = base_lr, warmup_epochs, total_epochs

    def on_epoch_start(self, trainer, epoch):
        if epoch < self.warmup:
            lr = self.base_lr * (epoch + 1) / self.warmup
        else:
            prog = (epoch - self.warmup) / max(1, self.total - self.warmup)
            lr = 0.5 * self.base_lr * (1 + math.cos(math.pi * prog))
        for group in trainer.optimizer.param_groups:
            group["lr"] = lr


class EarlyStopping(Callback):
    def __init__(self, monitor="val_loss", patience=3, min_delta=1e-4):
        self.monitor, self.patience, self.min_delta = monitor, patience, min_delta
        self.best, self.bad_epochs, self.best_state = float("inf"), 0, None

    def on_epoch_end(self, trainer, epoch, logs):
        value = logs[self.monitor]
        if value < self.best - self.min_delta:
            self.best, self.bad_epochs = value, 0
            self.best_state = copy.deepcopy(trainer.model.state_dict())
        else:
            self.bad_epochs += 1
            if self.bad_epochs >= self.patience:
                trainer.stop_training = True


class HistoryLogger(Callback):
    def __init__(self):
        self.history = []

    def on_epoch_start(self, trainer, epoch):
        self.t0 = time.time()

    def on_epoch_end(self, trainer, epoch, logs):
        self.history.append(dict(logs))
        print(f"epoch {epoch + 1:2d} lr={trainer.optimizer.param_groups[0]['lr']:.4f} "
              f"train_loss={logs['train_loss']:.4f} val_loss={logs['val_loss']:.4f} "
              f"val_acc={logs['val_acc']:.3f} "
              f"val_class_nll={[round(v, 3) for v in logs['val_class_nll']]} ({time.time() - self.t0:.1f}s)")


# ----------------------------------------------------------------------------- trainer
class Trainer:
    def __init__(self, model, optimizer, callbacks, batch_size=256):
        self.model, self.optimizer, self.callbacks = model, optimizer, callbacks
        self.batch_size = batch_size
        self.stop_training = False
        self.gen = torch.Generator().manual_seed(1)

    def _emit(self, name, *args):
        for cb in self.callbacks:
            getattr(cb, name)(self, *args)

    def _run_phase(self, phase, data):
        training = phase == "train"
        self.model.train(training)
        total, count = 0.0, 0
        with torch.set_grad_enabled(training):
            for x_num, emp, pur, y in batches(data, self.batch_size, training, self.gen):
                logits = self.model(x_num, emp, pur)
                loss = F.cross_entropy(logits, y)
                if training:
                    self.optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    self.optimizer.step()
                total += loss.item() * y.shape[0]
                count += y.shape[0]
                self._emit("on_batch_end", phase, logits, y, loss)
        return total / count

    def fit(self, train_data, val_data, epochs):
        self._emit("on_fit_start")
        for epoch in range(epochs):
            self._emit("on_epoch_start", epoch)
            logs = {"train_loss": self._run_phase("train", train_data),
                    "val_loss": self._run_phase("val", val_data)}
            self._emit("on_epoch_end", epoch, logs)
            if self.stop_training:
                print(f"early stopping after epoch {epoch + 1}")
                break


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(0)
    x_num, emp, pur, tier = make_loans(60_000)
    n_train = 48_000
    train = (x_num[:n_train], emp[:n_train], pur[:n_train], tier[:n_train])
    val = (x_num[n_train:], emp[n_train:], pur[n_train:], tier[n_train:])
    print("tier distribution:", torch.bincount(tier).tolist())

    model = RiskNet(x_num.shape[1])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    early = EarlyStopping(patience=3)
    logger = HistoryLogger()
    callbacks = [CosineWithWarmup(3e-3, 1, args.epochs),
                 ConfusionMatrixTracker(4, fixed=args.fixed), early, logger]
    Trainer(model, opt, callbacks, batch_size=512).fit(train, val, args.epochs)
    model.load_state_dict(early.best_state)
    print(f"best val_loss={early.best:.4f}, epochs run={len(logger.history)}")


if __name__ == "__main__":
    main()

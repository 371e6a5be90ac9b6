import copy
import math
import time

import torch
import torch.nn.functional as F


class Callback:
    def on_fit_start(self, trainer): pass
    def on_train_batch_end(self, trainer, loss): pass
    def on_validation_end(self, trainer, epoch, val_mae): pass


class NonFiniteLossGuard(Callback):
    """Abort as soon as the loss stops being finite, with enough context to debug it."""

    def __init__(self, fixed=False):
        self.fixed = fixed

    def on_fit_start(self, trainer):
        if not self.fixed:
            torch.autograd.set_detect_anomaly(True)  # PLANTED

    def on_train_batch_end(self, trainer, loss):
        if not math.isfinite(loss):
            raise FloatingPointError(f"non-finite loss at step {trainer.global_step}")


class EarlyStopping(Callback):
    def __init__(self, patience):
        self.patience, self.best, self.bad_epochs = patience, float("inf"), 0
        self.best_state = None

    def on_validation_end(self, trainer, epoch, val_mae):
        if val_mae < self.best:
            self.best, self.bad_epochs = val_mae, 0
            self.best_state = copy.deepcopy(trainer.model.state_dict())
        else:
            self.bad_epochs += 1
            trainer.should_stop = self.bad_epochs >= self.patience


class ProgressPrinter(Callback):
    def on_fit_start(self, trainer):
        self.t0, self.losses = time.perf_counter(), []

    def on_train_batch_end(self, trainer, loss):
        self.losses.append(loss)

    def on_validation_end(self, trainer, epoch, val_mae):
        train_loss = sum(self.losses) / max(1, len(self.losses))
        self.losses = []
        print(f"epoch {epoch}  train_mse {train_loss:.4f}  val_mae {val_mae:.4f}  "
              f"[{time.perf_counter() - self.t0:.1f}s]")


class Trainer:
    def __init__(self, model, datamodule, cfg, callbacks):
        self.model, self.dm, self.cfg = model, datamodule, cfg
        self.callbacks = callbacks
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        self.global_step = 0
        self.should_stop = False

    def _call(self, hook, *args):
        for cb in self.callbacks:
            getattr(cb, hook)(self, *args)

    @torch.no_grad()
    def validate(self):
        self.model.eval()
        abs_err, count = 0.0, 0
        for past, future_cal, target in self.dm.val_dataloader():
            pred = self.model(past, future_cal)
            abs_err += (pred - target).abs().sum().item()
            count += target.numel()
        self.model.train()
        return abs_err / count

    def fit(self):
        self._call("on_fit_start")
        self.model.train()
        for epoch in range(self.cfg.max_epochs):
            for past, future_cal, target in self.dm.train_dataloader(epoch):
                pred = self.model(past, future_cal)
                loss = F.mse_loss(pred, target)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
                self.optimizer.step()
                self.global_step += 1
                self._call("on_train_batch_end", loss.item())
            val_mae = self.validate()
            self._call("on_validation_end", epoch, val_mae)
            if self.should_stop:
                break
        return val_mae

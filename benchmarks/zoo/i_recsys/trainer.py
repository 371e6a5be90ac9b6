import time
import torch
import torch.nn.functional as F


class Callback:
    def on_fit_start(self, trainer): pass
    def on_batch_end(self, trainer, step, loss): pass
    def on_epoch_end(self, trainer, epoch, metrics): pass


class LossLogger(Callback):
    def __init__(self, every):
        self.every = every
        self.running = 0.0
        self.count = 0

    def on_batch_end(self, trainer, step, loss):
        self.running += loss
        self.count += 1
        if step % self.every == 0:
            print(f"  step {step:5d}  loss {self.running / self.count:.4f}")
            self.running, self.count = 0.0, 0


class EpochSummary(Callback):
    def on_fit_start(self, trainer):
        self.t0 = time.perf_counter()

    def on_epoch_end(self, trainer, epoch, metrics):
        elapsed = time.perf_counter() - self.t0
        print(f"epoch {epoch}: val_loss {metrics['val_loss']:.4f}  val_acc {metrics['val_acc']:.4f}  ({elapsed:.1f}s)")


class Trainer:
    def __init__(self, model, datamodule, cfg, callbacks=()):
        self.model = model
        self.dm = datamodule
        self.cfg = cfg
        self.callbacks = list(callbacks)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.global_step = 0

    def _emit(self, name, *args):
        for cb in self.callbacks:
            getattr(cb, name)(self, *args)

    def training_step(self, batch):
        logits = self.model(**{k: v for k, v in batch.items() if k != "label"})
        return F.binary_cross_entropy_with_logits(logits, batch["label"])

    @torch.no_grad()
    def validate(self):
        self.model.eval()
        total_loss, correct, n = 0.0, 0, 0
        for batch in self.dm.val_dataloader():
            logits = self.model(**{k: v for k, v in batch.items() if k != "label"})
            total_loss += F.binary_cross_entropy_with_logits(logits, batch["label"], reduction="sum").item()
            correct += ((logits > 0).float() == batch["label"]).sum().item()
            n += batch["label"].numel()
        self.model.train()
        return {"val_loss": total_loss / n, "val_acc": correct / n}

    def fit(self):
        self._emit("on_fit_start")
        metrics = {}
        for epoch in range(self.cfg.epochs):
            self.model.train()
            for batch in self.dm.train_dataloader(epoch):
                loss = self.training_step(batch)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                self.global_step += 1
                self._emit("on_batch_end", self.global_step, loss.item())
            metrics = self.validate()
            self._emit("on_epoch_end", epoch, metrics)
        return metrics

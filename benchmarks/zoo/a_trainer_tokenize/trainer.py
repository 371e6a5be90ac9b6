"""A small Trainer: fit / evaluate with callbacks, in the style of the common training libraries."""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader


class Callback:
    def on_epoch_end(self, trainer: Trainer, epoch: int, logs: dict) -> None:
        pass


class History(Callback):
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def on_epoch_end(self, trainer, epoch, logs):
        self.rows.append({"epoch": epoch, **logs})


class PrintProgress(Callback):
    def on_epoch_end(self, trainer, epoch, logs):
        print(f"epoch {epoch}: " + ", ".join(f"{k}={v:.4f}" for k, v in logs.items()))


class Trainer:
    def __init__(self, model: torch.nn.Module, lr: float = 2e-3, batch_size: int = 32,
                 callbacks: list[Callback] | None = None):
        self.model = model
        self.batch_size = batch_size
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True)
        self.callbacks = callbacks or []

    def fit(self, train_set, val_set, epochs: int) -> None:
        loader = DataLoader(train_set, batch_size=self.batch_size, shuffle=True,
                            generator=torch.Generator().manual_seed(0))
        for epoch in range(epochs):
            self.model.train()
            t0, total, n = time.perf_counter(), 0.0, 0
            for ids, labels in loader:
                loss = F.cross_entropy(self.model(ids), labels)
                loss.backward()
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                total, n = total + loss.item() * len(labels), n + len(labels)
            logs = {"loss": total / n, **self.evaluate(val_set), "seconds": time.perf_counter() - t0}
            for cb in self.callbacks:
                cb.on_epoch_end(self, epoch, logs)

    @torch.inference_mode()
    def evaluate(self, dataset) -> dict:
        self.model.eval()
        correct = 0
        for ids, labels in DataLoader(dataset, batch_size=256):
            correct += (self.model(ids).argmax(1) == labels).sum().item()
        return {"val_acc": correct / len(dataset)}

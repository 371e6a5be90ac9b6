"""A Trainer with fit / evaluate and callbacks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import BatchSampler, DataLoader, RandomSampler


class Callback:
    def on_epoch_end(self, trainer: Trainer, epoch: int, logs: dict) -> None:
        pass


class PrintLogs(Callback):
    def on_epoch_end(self, trainer, epoch, logs):
        print(f"epoch {epoch}: " + "  ".join(f"{k} {v:.4f}" for k, v in logs.items()))


class Trainer:
    def __init__(self, model: torch.nn.Module, callbacks: list[Callback], lr: float = 2e-3, batch_size: int = 512):
        self.model, self.callbacks, self.batch_size = model, callbacks, batch_size
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4, fused=True)

    def fit(self, train_set, val_set, epochs: int) -> None:
        # Whole batches indexed at once: a TensorDataset fetched sample by sample issues three
        # tiny index ops per sample (1,536 a batch), which torchneck rightly called dispatch
        # overhead (~25 % of this program's time, measured) when this program still did it.
        sampler = BatchSampler(RandomSampler(train_set, generator=torch.Generator().manual_seed(0)),
                               self.batch_size, drop_last=False)
        loader = DataLoader(train_set, sampler=sampler, batch_size=None)
        for epoch in range(epochs):
            self.model.train()
            total = torch.zeros(())
            for numeric, cats, clicks in loader:
                loss = F.binary_cross_entropy_with_logits(self.model(numeric, cats), clicks)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                self.optimizer.step()
                total += loss.detach() * len(clicks)
            logs = {"loss": total.item() / len(train_set), **self.evaluate(val_set)}
            for cb in self.callbacks:
                cb.on_epoch_end(self, epoch, logs)

    @torch.inference_mode()
    def evaluate(self, dataset) -> dict:
        self.model.eval()
        numeric, cats, clicks = dataset.tensors
        logits = self.model(numeric, cats)
        return {"val_loss": F.binary_cross_entropy_with_logits(logits, clicks).item(),
                "val_acc": ((logits > 0).float() == clicks).float().mean().item()}

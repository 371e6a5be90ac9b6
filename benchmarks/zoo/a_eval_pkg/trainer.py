"""Trainer with fit / evaluate / predict."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def pad_batch(seqs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True)
    return tokens, tokens == 0


class Trainer:
    def __init__(self, model: torch.nn.Module, lr: float = 3e-4, batch_size: int = 64, no_grad_eval: bool = False):
        self.model, self.batch_size, self.no_grad_eval = model, batch_size, no_grad_eval
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True)

    def fit(self, seqs: list[torch.Tensor], labels: torch.Tensor, steps: int) -> None:
        """Fine-tune on a few batches of the labelled set."""
        self.model.train()
        g = torch.Generator().manual_seed(0)
        for _ in range(steps):
            idx = torch.randint(0, len(seqs), (8,), generator=g)
            tokens, padding = pad_batch([seqs[i] for i in idx])
            loss = F.cross_entropy(self.model(tokens, padding), labels[idx])
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()

    def evaluate(self, seqs: list[torch.Tensor], labels: torch.Tensor) -> dict:
        self.model.eval()
        correct, total_loss = 0, 0.0
        with torch.inference_mode(self.no_grad_eval):  # PLANTED
            for start in range(0, len(seqs), self.batch_size):
                tokens, padding = pad_batch(seqs[start:start + self.batch_size])
                logits = self.model(tokens, padding)
                y = labels[start:start + self.batch_size]
                total_loss += F.cross_entropy(logits, y, reduction="sum").item()
                correct += (logits.argmax(1) == y).sum().item()
        return {"eval_loss": total_loss / len(seqs), "eval_accuracy": correct / len(seqs)}

"""Sentence classification over frozen pretrained word vectors, with a Trainer and an
exponential-moving-average (EMA) callback.

After every optimizer step the EMA callback deep-copies the whole model and blends the copy
with the running average: a full model copy per step. --fixed keeps one EMA model and updates
its weights in place (torch._foreach_lerp_), the same arithmetic."""

from __future__ import annotations

import argparse
import copy

import torch
import torch.nn.functional as F

FIXED = False


class Callback:
    def on_train_start(self, trainer: Trainer) -> None:
        pass

    def on_step_end(self, trainer: Trainer, step: int, loss: float) -> None:
        pass


class EMA(Callback):
    def __init__(self, decay: float = 0.99):
        self.decay = decay
        self.ema: torch.nn.Module | None = None

    def on_train_start(self, trainer):
        self.ema = copy.deepcopy(trainer.model).eval().requires_grad_(False)

    @torch.no_grad()
    def on_step_end(self, trainer, step, loss):
        assert self.ema is not None
        if FIXED:
            ema_params = list(self.ema.parameters())
            torch._foreach_lerp_(ema_params, list(trainer.model.parameters()), 1 - self.decay)
            return
        snapshot = copy.deepcopy(trainer.model)  # PLANTED
        for avg, new in zip(self.ema.parameters(), snapshot.parameters()):
            avg.lerp_(new, 1 - self.decay)


class PrintLoss(Callback):
    def on_step_end(self, trainer, step, loss):
        if step % 50 == 0:
            print(f"step {step}: loss {loss:.4f}")


class Trainer:
    def __init__(self, model: torch.nn.Module, callbacks: list[Callback]):
        self.model, self.callbacks = model, callbacks
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, foreach=True)

    def fit(self, steps: int, batch: int = 64) -> None:
        g = torch.Generator().manual_seed(0)
        vocab = self.model.vectors.shape[0]
        topic_words = torch.randint(0, vocab, (8, 50), generator=g)
        for cb in self.callbacks:
            cb.on_train_start(self)
        for step in range(1, steps + 1):
            y = torch.randint(0, 8, (batch,), generator=g)
            words = torch.where(torch.rand(batch, 40, generator=g) < 0.3,
                                topic_words[y][:, torch.randint(0, 50, (40,), generator=g)],
                                torch.randint(0, vocab, (batch, 40), generator=g))
            loss = F.cross_entropy(self.model(words), y)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            for cb in self.callbacks:
                cb.on_step_end(self, step, loss.item())


class BagOfVectors(torch.nn.Module):
    """Mean of frozen pretrained word vectors (a buffer), then a small trainable MLP."""

    def __init__(self, vocab: int = 40000, dim: int = 256, classes: int = 8):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.register_buffer("vectors", torch.randn(vocab, dim, generator=g) / dim ** 0.5)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 256), torch.nn.ReLU(), torch.nn.Linear(256, classes))

    def forward(self, words):
        return self.mlp(F.embedding_bag(words, self.vectors, mode="mean"))


def main() -> None:
    global FIXED
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--fixed", action="store_true", help="update the EMA weights in place")
    args = ap.parse_args()
    FIXED = args.fixed
    torch.manual_seed(0)
    ema = EMA()
    Trainer(BagOfVectors(), [ema, PrintLoss()]).fit(args.steps)
    assert ema.ema is not None
    print(f"ema weight norm {sum(p.norm() ** 2 for p in ema.ema.parameters()) ** 0.5:.6f}")


if __name__ == "__main__":
    main()

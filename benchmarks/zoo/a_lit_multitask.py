"""Multi-task learning in the style of a LightningModule: a shared trunk and one head per task;
each batch comes from one task (round robin), so each step trains the trunk and one head.

The module's optimizer_zero_grad hook zeroes gradients in place (set_to_none=False): every
head keeps a zero gradient, so each step memsets and updates all 48 heads, not just the one
that was used. --fixed sets gradients to None, so the optimizer skips the heads without one."""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

FIXED = False

class MultiTaskModule(torch.nn.Module):
    def __init__(self, tasks: int = 48, features: int = 64, hidden: int = 256, classes: int = 2000):
        super().__init__()
        self.trunk = torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.ReLU(),
                                         torch.nn.Linear(hidden, hidden), torch.nn.ReLU())
        self.heads = torch.nn.ModuleList([torch.nn.Linear(hidden, classes) for _ in range(tasks)])

    def forward(self, x, task: int):
        return self.heads[task](self.trunk(x))

    def training_step(self, batch, batch_idx):
        x, y, task = batch
        return F.cross_entropy(self(x, task), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, foreach=True)

    def optimizer_zero_grad(self, optimizer):
        optimizer.zero_grad(set_to_none=FIXED)  # PLANTED


def task_batches(tasks: int, steps: int, batch: int = 64, features: int = 64, classes: int = 2000):
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(tasks, classes, features, generator=g)
    for step in range(steps):
        task = step % tasks
        y = torch.randint(0, classes, (batch,), generator=g)
        x = centers[task, y] + 0.5 * torch.randn(batch, features, generator=g)
        yield x, y, task


def fit(module: MultiTaskModule, steps: int) -> None:
    optimizer = module.configure_optimizers()
    for batch_idx, batch in enumerate(task_batches(len(module.heads), steps)):
        loss = module.training_step(batch, batch_idx)
        loss.backward()
        optimizer.step()
        module.optimizer_zero_grad(optimizer)
        if batch_idx % 48 == 47:
            print(f"step {batch_idx + 1}: loss {loss.item():.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--fixed", action="store_true", help="zero_grad(set_to_none=True)")
    args = ap.parse_args()
    global FIXED
    FIXED = args.fixed
    torch.manual_seed(0)
    module = MultiTaskModule()
    fit(module, args.steps)


if __name__ == "__main__":
    main()

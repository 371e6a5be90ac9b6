"""Train the tabular model.

    python train.py [--epochs 3] [--fixed]

--fixed calls runtime.setup(debug=False): no autograd anomaly detection."""

from __future__ import annotations

import argparse

import runtime
import torch
import torch.nn.functional as F
from data import CARDINALITIES, batches, make_table
from model import TabularResNet


def training_step(model, optimizer, batch) -> float:
    numeric, categorical, target = batch
    loss = F.mse_loss(model(numeric, categorical), target)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


def train_one_epoch(model, optimizer, table, generator) -> float:
    model.train()
    total, rows = 0.0, 0
    for batch in batches(*table, batch_size=64, generator=generator):
        total += training_step(model, optimizer, batch) * len(batch[2])
        rows += len(batch[2])
    return total / rows


@torch.inference_mode()
def evaluate(model, table) -> float:
    model.eval()
    numeric, categorical, target = table
    return F.mse_loss(model(numeric, categorical), target).item()


def fit(model, train_table, val_table, epochs: int) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=3e-3, momentum=0.9, nesterov=True, foreach=True)
    generator = torch.Generator().manual_seed(0)
    for epoch in range(epochs):
        train_mse = train_one_epoch(model, optimizer, train_table, generator)
        print(f"epoch {epoch}: train mse {train_mse:.4f}  val mse {evaluate(model, val_table):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--fixed", action="store_true", help="no anomaly detection")
    args = ap.parse_args()
    runtime.setup(seed=0, debug=not args.fixed)
    x, cats, y = make_table(9600)
    model = TabularResNet(x.shape[1], CARDINALITIES)
    fit(model, (x[:8000], cats[:8000], y[:8000]), (x[8000:], cats[8000:], y[8000:]), args.epochs)


if __name__ == "__main__":
    main()

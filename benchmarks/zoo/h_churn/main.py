"""Train a churn classifier on a synthetic customer table."""
import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import CATEGORICAL, NUMERIC, ChurnDataset, make_churn_table  # noqa: E402
from model import TabularMLP  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=4_500)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--fixed", action="store_true")
    return p.parse_args()


def split_indices(n, val_frac=0.2, seed=0):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    n_val = int(n * val_frac)
    return perm[n_val:], perm[:n_val]


@torch.no_grad()
def evaluate(model, loader, loss_fn):
    model.eval()
    total_loss, correct, count = 0.0, 0, 0
    for batch in loader:
        logits = model(batch["cat"], batch["num"])
        total_loss += loss_fn(logits, batch["label"]).item() * logits.shape[0]
        correct += ((logits > 0).float() == batch["label"]).sum().item()
        count += logits.shape[0]
    return total_loss / count, correct / count


def main():
    args = parse_args()
    torch.manual_seed(0)
    table = make_churn_table(args.rows)
    train_idx, val_idx = split_indices(args.rows)
    train_ds = ChurnDataset(table, train_idx, precompute_stats=args.fixed)
    val_ds = ChurnDataset(table, val_idx, precompute_stats=args.fixed)
    print(f"train rows={len(train_ds)} val rows={len(val_ds)} "
          f"churn rate={table['label'].mean():.3f}")

    train_loader = DataLoader(train_ds, batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(val_ds, batch_size=1024)

    model = TabularMLP(list(CATEGORICAL.values()), len(NUMERIC))
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    loss_fn = nn.BCEWithLogitsLoss()

    for epoch in range(args.epochs):
        model.train()
        t0 = time.time()
        running, seen = 0.0, 0
        for batch in train_loader:
            logits = model(batch["cat"], batch["num"])
            loss = loss_fn(logits, batch["label"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            running += loss.item() * logits.shape[0]
            seen += logits.shape[0]
        val_loss, val_acc = evaluate(model, val_loader, loss_fn)
        print(f"epoch {epoch + 1}: train_loss={running / seen:.4f} "
              f"val_loss={val_loss:.4f} val_acc={val_acc:.3f} ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()

"""Train a BPR two-tower recommender on a synthetic clickstream."""
import argparse
import time

import torch

from data import BatchEncoder, iterate_batches, make_synthetic_log
from model import TwoTowerMF, recall_at_k


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--users", type=int, default=20000)
    ap.add_argument("--items", type=int, default=200000)
    ap.add_argument("--events", type=int, default=40000)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()

    torch.manual_seed(0)
    users, catalogue, events = make_synthetic_log(args.users, args.items, args.events)
    n_val = 1024
    train_events, val_events = events[:-n_val], events[-n_val:]

    enc = BatchEncoder(users, catalogue, n_neg=8, fixed=args.fixed)
    model = TwoTowerMF(len(users), len(catalogue))
    opts = model.optimizers(args.lr)

    t0 = time.time()
    step = 0
    for epoch in range(args.epochs):
        model.train()
        running = 0.0
        for raw in iterate_batches(train_events, args.batch_size, seed=epoch):
            u, pos, neg = enc.encode(raw)
            loss = model.bpr_loss(u, pos, neg)
            for opt in opts:
                opt.zero_grad(set_to_none=True)
            loss.backward()
            for opt in opts:
                opt.step()
            running += loss.detach()
            step += 1
            if step % 50 == 0:
                print(f"epoch {epoch} step {step} loss {running.item() / 50:.4f}")
                running = 0.0
        model.eval()
        vu, vpos, _ = enc.encode(val_events)
        print(f"epoch {epoch} recall@20 {recall_at_k(model, vu, vpos):.4f}")
    print(f"train time {time.time() - t0:.2f}s over {step} steps")


if __name__ == "__main__":
    main()

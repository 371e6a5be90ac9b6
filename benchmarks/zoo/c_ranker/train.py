"""Train a pointwise scorer with a pairwise ranking loss.  Usage: python c_ranker/train.py [--fixed]"""
import argparse
import time

import torch

from data import iterate, make_ltr_data
from losses import ndcg_at_k, ranking_loss
from model import Scorer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--epochs", type=int, default=6)
    args = ap.parse_args()
    torch.manual_seed(0)
    X, y = make_ltr_data(12000, 32, 24, seed=1)
    Xv, yv = make_ltr_data(2000, 32, 24, seed=2)
    model = Scorer(24)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    t0 = time.time()
    for ep in range(args.epochs):
        model.train()
        tot, n = 0.0, 0
        for xb, yb in iterate(X, y, 128, gen):
            loss = ranking_loss(model(xb), yb, vectorized=args.fixed)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item()
            n += 1
        model.eval()
        with torch.no_grad():
            nd = ndcg_at_k(model(Xv), yv)
        print(f"epoch {ep}: loss {tot / n:.4f} val ndcg@10 {nd:.4f}")
    print(f"trained in {time.time() - t0:.2f}s")


if __name__ == "__main__":
    main()

"""Evaluate a trained tabular classifier on a held-out set: confusion matrix, per-class precision/recall, macro F1."""
import argparse

import numpy as np
import torch
from torch import nn

N_CLASSES = 12
N_FEATURES = 48


def make_test_set(n, seed=0):
    centers = torch.randn(N_CLASSES, N_FEATURES, generator=torch.Generator().manual_seed(42)) * 0.6
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, N_CLASSES, (n,), generator=g)
    x = centers[y] + torch.randn(n, N_FEATURES, generator=g)
    return x, y


def predict(model, x, batch_size=8192):
    with torch.inference_mode():
        return torch.cat([model(xb).argmax(1) for xb in x.split(batch_size)])


def confusion_matrix(pred, target, fixed):
    if fixed:
        return torch.bincount(target * N_CLASSES + pred, minlength=N_CLASSES ** 2).view(N_CLASSES, N_CLASSES).numpy()
    conf = np.zeros((N_CLASSES, N_CLASSES), dtype=np.int64)
    for p, t in zip(pred, target):
        conf[t.item(), p.item()] += 1  # PLANTED
    return conf


def report(conf):
    tp = np.diag(conf).astype(float)
    precision = tp / np.maximum(conf.sum(0), 1)
    recall = tp / np.maximum(conf.sum(1), 1)
    f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-12)
    for c in range(N_CLASSES):
        print(f"class {c:2d}  precision {precision[c]:.3f}  recall {recall[c]:.3f}  f1 {f1[c]:.3f}")
    print(f"accuracy {tp.sum() / conf.sum():.4f}  macro F1 {f1.mean():.4f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400_000)
    ap.add_argument("--fixed", action="store_true", help="confusion matrix with one bincount")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(N_FEATURES, 128), nn.ReLU(), nn.Linear(128, N_CLASSES)).eval()
    # a quick fit so that the numbers mean something
    x_train, y_train = make_test_set(20_000, seed=1)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for xb, yb in zip(x_train.split(500), y_train.split(500)):
        loss = nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    x, y = make_test_set(args.n)
    pred = predict(model, x)
    report(confusion_matrix(pred, y, args.fixed))


if __name__ == "__main__":
    main()

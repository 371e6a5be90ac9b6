"""Random-kernel feature extraction + closed-form ridge classifier for
activity recognition on sensor windows.

usage: python tsfeat/main.py [--fixed]
"""
import time

import torch

from data import N_CHANNELS, N_CLASSES, make_loaders
from features import RandomConvFeatures, extract

ALPHAS = (0.1, 1.0, 10.0, 100.0)


def fit_ridge(X, y, alpha):
    Y = torch.full((len(y), N_CLASSES), -1.0)
    Y[torch.arange(len(y)), y] = 1.0
    Xb = torch.cat([X, torch.ones(len(X), 1)], dim=1)
    A = Xb.T @ Xb + alpha * torch.eye(Xb.shape[1])
    return torch.linalg.solve(A, Xb.T @ Y)


def predict(W, X):
    return (torch.cat([X, torch.ones(len(X), 1)], dim=1) @ W).argmax(dim=1)


def main():
    torch.manual_seed(0)
    t0 = time.perf_counter()
    train_loader, test_loader = make_loaders(n_train=400, n_test=100, batch_size=256)
    transform = RandomConvFeatures(N_CHANNELS).eval()

    X_tr, y_tr = extract(transform, train_loader)
    X_te, y_te = extract(transform, test_loader)
    print(f"extracted {transform.n_features} features for {len(X_tr)}+{len(X_te)} windows "
          f"({time.perf_counter() - t0:.1f}s)")

    mu, sd = X_tr.mean(0), X_tr.std(0) + 1e-6
    X_tr, X_te = (X_tr - mu) / sd, (X_te - mu) / sd

    # simple hold-out model selection over the ridge penalty
    n_fit = int(0.8 * len(X_tr))
    best = None
    for alpha in ALPHAS:
        W = fit_ridge(X_tr[:n_fit], y_tr[:n_fit], alpha)
        acc = (predict(W, X_tr[n_fit:]) == y_tr[n_fit:]).float().mean().item()
        print(f"alpha={alpha:g}: holdout acc={acc:.4f}")
        if best is None or acc > best[1]:
            best = (alpha, acc)

    W = fit_ridge(X_tr, y_tr, best[0])
    pred = predict(W, X_te)
    print(f"test accuracy (alpha={best[0]:g}): {(pred == y_te).float().mean().item():.4f}")
    for c in range(N_CLASSES):
        m = y_te == c
        print(f"  class {c}: recall={(pred[m] == c).float().mean().item():.3f} (n={int(m.sum())})")


if __name__ == "__main__":
    main()

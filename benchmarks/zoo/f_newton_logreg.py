"""Fit an L2-regularised logistic regression on random Fourier features with a
truncated Newton (Newton-CG) solver, then report train/test metrics.

usage: python newton_logreg.py [--fixed]
"""
import sys
import time

import torch

FIXED = "--fixed" in sys.argv

N_TRAIN, N_TEST, D_IN, D_FEAT = 4000, 2000, 6, 500
LAM = 1e-4
NEWTON_ITERS = 8
CG_ITERS = 20
CG_TOL = 1e-4  # relative to |grad|


def make_data(n, gen):
    x = torch.randn(n, D_IN, generator=gen)
    # nonlinear decision boundary: sign of a wiggly function of two projections
    z = torch.sin(2.0 * x[:, 0]) + 0.5 * x[:, 1] ** 2 - 0.7 * x[:, 2] * x[:, 3]
    y = (z + 0.3 * torch.randn(n, generator=gen) > 0.3).float()
    return x, y


def fourier_features(x, w, b):
    return 2.0 ** 0.5 * torch.cos(x @ w + b)


def objective(theta, X, y):
    logits = X @ theta
    loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, y)
    return loss + 0.5 * LAM * theta.dot(theta)


def gradient(theta, X, y):
    p = torch.sigmoid(X @ theta)
    return X.T @ (p - y) / X.shape[0] + LAM * theta


def hessian_vector_product(X, s, v):
    """H v with H = X^T diag(s) X / n + lam I (s = p(1-p))."""
    n = X.shape[0]
    if FIXED:
        return X.T @ (s * (X @ v)) / n + LAM * v
    return X.T @ (s[:, None] * X) @ v / n + LAM * v  # PLANTED


def conjugate_gradient(hvp, b, iters, tol):
    x = torch.zeros_like(b)
    r = b.clone()
    p = r.clone()
    rs = r.dot(r)
    stop = tol * b.norm()
    for i in range(iters):
        hp = hvp(p)
        alpha = rs / p.dot(hp)
        x += alpha * p
        r -= alpha * hp
        rs_new = r.dot(r)
        if rs_new.sqrt() < stop:
            break
        p = r + (rs_new / rs) * p
        rs = rs_new
    return x, i + 1


def line_search(theta, direction, X, y, f0, g0, alpha=1.0, c=1e-4, shrink=0.5):
    slope = g0.dot(direction)
    while alpha > 1e-6:
        cand = theta + alpha * direction
        if objective(cand, X, y) <= f0 + c * alpha * slope:
            return cand, alpha
        alpha *= shrink
    return theta, 0.0


def newton_cg(X, y):
    theta = torch.zeros(X.shape[1])
    history = []
    for it in range(NEWTON_ITERS):
        f = objective(theta, X, y)
        g = gradient(theta, X, y)
        p = torch.sigmoid(X @ theta)
        s = p * (1 - p)
        step, n_cg = conjugate_gradient(lambda v: hessian_vector_product(X, s, v),
                                        -g, CG_ITERS, CG_TOL)
        theta, alpha = line_search(theta, step, X, y, f, g)
        history.append((it, f.item(), g.norm().item(), n_cg, alpha))
    return theta, history


def auc(scores, labels):
    order = torch.argsort(scores)
    ranks = torch.empty_like(scores)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=scores.dtype)
    n_pos = labels.sum()
    n_neg = len(labels) - n_pos
    return ((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).item()


def main():
    gen = torch.Generator().manual_seed(1234)
    x_tr, y_tr = make_data(N_TRAIN, gen)
    x_te, y_te = make_data(N_TEST, gen)
    w = torch.randn(D_IN, D_FEAT, generator=gen) * 0.5
    b = torch.rand(D_FEAT, generator=gen) * 2 * torch.pi
    X_tr = fourier_features(x_tr, w, b)
    X_te = fourier_features(x_te, w, b)

    t0 = time.perf_counter()
    theta, history = newton_cg(X_tr, y_tr)
    for it, f, gn, n_cg, alpha in history:
        print(f"newton {it}: f={f:.5f} |g|={gn:.2e} cg_iters={n_cg} step={alpha:g}")
    print(f"solver time {time.perf_counter() - t0:.2f}s")

    with torch.no_grad():
        for name, X, y in (("train", X_tr, y_tr), ("test", X_te, y_te)):
            scores = X @ theta
            acc = ((scores > 0).float() == y).float().mean().item()
            print(f"{name}: acc={acc:.4f} auc={auc(scores, y):.4f}")


if __name__ == "__main__":
    main()

"""Churn model selection: k-fold CV of an L2-regularised logistic regression.

Synthetic customer table (numeric + categorical columns), per-fold feature
engineering (standardisation, one-hot, smoothed target encoding, interactions),
full-batch L-BFGS fits for a grid of ridge strengths, then a refit on the whole
training split with the best strength and a score on the held-out test split.
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

NUMERIC = ["age", "tenure_months", "monthly_spend", "balance", "support_calls", "logins_30d"]
CATEGORICAL = {"region": 12, "plan": 5, "channel": 4, "device": 6}
HIGH_CARD = {"occupation": 60, "postcode_area": 300}
INTERACTIONS = [("tenure_months", "monthly_spend"), ("support_calls", "logins_30d"),
                ("age", "balance"), ("tenure_months", "support_calls")]


def make_customers(n, seed):
    """Generate a churn table with nonlinear effects and a couple of interactions."""
    rng = np.random.default_rng(seed)
    cols = {
        "age": rng.normal(42, 12, n).clip(18, 90),
        "tenure_months": rng.gamma(2.0, 14.0, n),
        "monthly_spend": rng.lognormal(3.6, 0.6, n),
        "balance": rng.normal(0, 1, n) * 800 + 300,
        "support_calls": rng.poisson(1.3, n).astype(np.float64),
        "logins_30d": rng.poisson(9.0, n).astype(np.float64),
    }
    for name, k in {**CATEGORICAL, **HIGH_CARD}.items():
        p = rng.dirichlet(np.full(k, 0.8))
        cols[name] = rng.choice(k, size=n, p=p)

    eff = {name: rng.normal(0, 0.6, k) for name, k in {**CATEGORICAL, **HIGH_CARD}.items()}
    z = (-1.0
         - 0.025 * (cols["tenure_months"] - 28)
         + 0.35 * np.log(cols["monthly_spend"] / 35.0)
         + 0.45 * (cols["support_calls"] - 1.3)
         - 0.06 * (cols["logins_30d"] - 9.0)
         + 0.0004 * (cols["balance"] - 300) * (cols["age"] < 30)
         + 0.012 * cols["support_calls"] * cols["tenure_months"] / 10.0
         + 0.0003 * (cols["age"] - 42) ** 2)
    for name in eff:
        z = z + eff[name][cols[name]]
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-z))).astype(np.float64)
    return cols, y


class FeatureBuilder:
    """Fitted on the training rows of a fold, then applied to any rows."""

    def __init__(self, smoothing=20.0):
        self.smoothing = smoothing

    def fit(self, cols, y, idx):
        num = self._numeric(cols, idx)
        self.mu, self.sd = num.mean(0), num.std(0) + 1e-8
        prior = y[idx].mean()
        self.te = {}
        for name, k in HIGH_CARD.items():
            c = cols[name][idx]
            cnt = np.bincount(c, minlength=k)
            pos = np.bincount(c, weights=y[idx], minlength=k)
            self.te[name] = (pos + self.smoothing * prior) / (cnt + self.smoothing)
        self.prior = prior
        return self

    @staticmethod
    def _numeric(cols, idx):
        raw = [cols[c][idx] for c in NUMERIC]
        raw[NUMERIC.index("monthly_spend")] = np.log1p(raw[NUMERIC.index("monthly_spend")])
        raw[NUMERIC.index("tenure_months")] = np.sqrt(raw[NUMERIC.index("tenure_months")])
        return np.stack(raw, axis=1)

    def transform(self, cols, idx):
        num = (self._numeric(cols, idx) - self.mu) / self.sd
        blocks = [num, num ** 2]
        for a, b in INTERACTIONS:
            blocks.append((num[:, NUMERIC.index(a)] * num[:, NUMERIC.index(b)])[:, None])
        for name, k in CATEGORICAL.items():
            blocks.append(np.eye(k)[cols[name][idx]][:, 1:])  # drop first level
        for name in HIGH_CARD:
            p = self.te[name][cols[name][idx]]
            blocks.append(np.log(p / (1 - p))[:, None] - math.log(self.prior / (1 - self.prior)))
        # spend interacts with the plan the customer is on
        spend = num[:, NUMERIC.index("monthly_spend")][:, None]
        blocks.append(spend * np.eye(CATEGORICAL["plan"])[cols["plan"][idx]])
        return torch.from_numpy(np.concatenate(blocks, axis=1).astype(np.float32))


class LogisticRegression(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d))
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        return x @ self.weight + self.bias


def fit_lbfgs(X, y, lam, max_iter):
    model = LogisticRegression(X.shape[1])
    opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=max_iter,
                            history_size=20, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-6, tolerance_change=1e-9)
    n_evals = 0

    def closure():
        nonlocal n_evals
        n_evals += 1
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(X), y)
        loss = loss + 0.5 * lam * model.weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return model, n_evals


def roc_auc(scores, labels, chunk=4096):
    """P(score of a random positive > score of a random negative), ties count 1/2."""
    pos = scores[labels == 1]
    neg = scores[labels == 0]
    wins = 0.0
    for i in range(0, pos.numel(), chunk):
        p = pos[i:i + chunk, None]
        wins += (p > neg).sum().item() + 0.5 * (p == neg).sum().item()  # PLANTED
    return wins / (pos.numel() * neg.numel())


def roc_auc_ranked(scores, labels):
    """Mann-Whitney U from average ranks (same value as roc_auc, ties count 1/2)."""
    order = torch.argsort(scores)
    s, lab = scores[order], labels[order]
    _, inv, counts = torch.unique_consecutive(s, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()
    avg_rank = ends - (counts.double() - 1.0) / 2.0
    n_pos = int(lab.sum().item())
    n_neg = lab.numel() - n_pos
    r_pos = avg_rank[inv][lab == 1].sum().item()
    return (r_pos - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def kfold_indices(n, k, seed):
    perm = np.random.default_rng(seed).permutation(n)
    return np.array_split(perm, k)


@torch.no_grad()
def evaluate(model, X, y, auc_fn):
    logits = model(X)
    return {"logloss": F.binary_cross_entropy_with_logits(logits, y).item(),
            "auc": auc_fn(logits, y)}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n-rows", type=int, default=22000)
    ap.add_argument("--test-frac", type=float, default=0.2)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--lambdas", type=str, default="1e-3,1e-2,1e-1")
    ap.add_argument("--max-iter", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    auc_fn = roc_auc_ranked if args.fixed else roc_auc
    t0 = time.time()

    cols, y_all = make_customers(args.n_rows, args.seed)
    perm = np.random.default_rng(args.seed + 1).permutation(args.n_rows)
    n_test = int(args.test_frac * args.n_rows)
    test_idx, dev_idx = perm[:n_test], perm[n_test:]
    print(f"rows: dev={dev_idx.size} test={test_idx.size}  churn rate={y_all.mean():.3f}")

    lambdas = [float(v) for v in args.lambdas.split(",")]
    folds = kfold_indices(dev_idx.size, args.folds, args.seed + 2)
    # Features depend only on the fold, not on lambda: build them once per fold.
    fold_data = []
    for k in range(args.folds):
        va = dev_idx[folds[k]]
        tr = dev_idx[np.concatenate([folds[j] for j in range(args.folds) if j != k])]
        fb = FeatureBuilder().fit(cols, y_all, tr)
        fold_data.append((fb.transform(cols, tr), torch.tensor(y_all[tr], dtype=torch.float32),
                          fb.transform(cols, va), torch.tensor(y_all[va], dtype=torch.float32)))
    print(f"design matrix: {fold_data[0][0].shape[1]} features")

    results = {}
    print(f"{'lambda':>8} {'train_auc':>10} {'val_auc':>14} {'val_logloss':>12} {'evals':>6}")
    for lam in lambdas:
        tr_auc, va_auc, va_ll, evals = [], [], [], 0
        for Xtr, ytr, Xva, yva in fold_data:
            model, n_ev = fit_lbfgs(Xtr, ytr, lam, args.max_iter)
            evals += n_ev
            tr_auc.append(evaluate(model, Xtr, ytr, auc_fn)["auc"])
            m = evaluate(model, Xva, yva, auc_fn)
            va_auc.append(m["auc"])
            va_ll.append(m["logloss"])
        results[lam] = (np.mean(va_auc), np.std(va_auc), np.mean(va_ll))
        print(f"{lam:8.0e} {np.mean(tr_auc):10.4f} {np.mean(va_auc):8.4f}+-{np.std(va_auc):.4f}"
              f" {np.mean(va_ll):12.4f} {evals:6d}")

    best = max(lambdas, key=lambda l: (round(results[l][0], 6), -results[l][2]))
    print(f"best lambda by CV AUC: {best:.0e}")

    fb = FeatureBuilder().fit(cols, y_all, dev_idx)
    Xdev, ydev = fb.transform(cols, dev_idx), torch.tensor(y_all[dev_idx], dtype=torch.float32)
    Xte, yte = fb.transform(cols, test_idx), torch.tensor(y_all[test_idx], dtype=torch.float32)
    model, n_ev = fit_lbfgs(Xdev, ydev, best, args.max_iter)
    dev_m, test_m = evaluate(model, Xdev, ydev, auc_fn), evaluate(model, Xte, yte, auc_fn)
    print(f"refit ({n_ev} evals): dev auc={dev_m['auc']:.4f}  test auc={test_m['auc']:.4f}"
          f"  test logloss={test_m['logloss']:.4f}")
    w = model.weight.detach()
    print(f"|w|_2={w.norm():.4f}  largest coef={w.abs().max():.4f}  elapsed {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()

"""Credit default scoring: numpy preprocessing + torch model behind a fit/predict wrapper."""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

NUMERIC = ["income", "age", "debt_ratio", "open_lines", "utilization",
           "months_employed", "late_30", "late_90", "loan_amount"]
CATEGORICAL = ["region", "product", "employer"]


def make_applications(n, rng, n_employers):
    """Synthesize an application table as a dict of numpy columns."""
    cols = {
        "income": rng.lognormal(10.5, 0.6, n),
        "age": rng.integers(19, 80, n).astype(np.float32),
        "debt_ratio": rng.beta(2, 5, n) * 3,
        "open_lines": rng.poisson(6, n).astype(np.float32),
        "utilization": np.clip(rng.normal(0.4, 0.25, n), 0, 1.5),
        "months_employed": rng.exponential(60, n),
        "late_30": rng.poisson(0.3, n).astype(np.float32),
        "late_90": rng.poisson(0.08, n).astype(np.float32),
        "loan_amount": rng.lognormal(9.5, 0.8, n),
        "region": rng.integers(0, 48, n),
        "product": rng.integers(0, 7, n),
        "employer": rng.zipf(1.2, n) % n_employers,
    }
    for c in ("income", "months_employed", "utilization"):
        cols[c][rng.random(n) < 0.07] = np.nan
    emp_risk = rng.normal(0, 0.8, n_employers)
    logit = (-2.0 + 1.4 * cols["debt_ratio"] + 0.9 * cols["late_90"] + 0.4 * cols["late_30"]
             - 0.3 * np.log(np.nan_to_num(cols["income"], nan=30000.0))
             + 0.02 * (45 - cols["age"]) + emp_risk[cols["employer"]] + 3.0)
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return cols, y


class TabularPreprocessor:
    def fit(self, cols):
        self.medians = {c: np.nanmedian(cols[c]) for c in NUMERIC}
        num = self._numeric(cols)
        self.mean, self.std = num.mean(0), num.std(0) + 1e-6
        self.vocab = {c: np.unique(cols[c]) for c in CATEGORICAL}
        return self

    def _numeric(self, cols):
        out = []
        for c in NUMERIC:
            v = np.where(np.isnan(cols[c]), self.medians[c], cols[c])
            if c in ("income", "loan_amount", "months_employed"):
                v = np.log1p(v)
            out.append(v)
        return np.stack(out, 1).astype(np.float32)

    def transform(self, cols):
        num = (self._numeric(cols) - self.mean) / self.std
        cats = []
        for c in CATEGORICAL:
            pos = np.searchsorted(self.vocab[c], cols[c])
            pos = np.clip(pos, 0, len(self.vocab[c]) - 1)
            known = self.vocab[c][pos] == cols[c]
            cats.append(np.where(known, pos + 1, 0))
        return torch.from_numpy(num.astype(np.float32)), torch.from_numpy(np.stack(cats, 1).astype(np.int64))


class ScoringNet(nn.Module):
    def __init__(self, n_num, cards, fixed=False):
        super().__init__()
        self.fixed = fixed
        self.n_employers = cards[2]
        self.region = nn.Embedding(cards[0], 8)
        self.product = nn.Embedding(cards[1], 4)
        self.employer_table = nn.Parameter(torch.randn(cards[2], 16) * 0.05)
        self.mlp = nn.Sequential(
            nn.Linear(n_num + 8 + 4 + 16, 128), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, num, cat):
        emp = cat[:, 2]
        if self.fixed:
            emp_vec = self.employer_table[emp]
        else:
            emp_vec = F.one_hot(emp, self.n_employers).to(num.dtype) @ self.employer_table  # PLANTED
        h = torch.cat([num, self.region(cat[:, 0]), self.product(cat[:, 1]), emp_vec], 1)
        return self.mlp(h).squeeze(1)


def roc_auc(y, p):
    order = np.argsort(p)
    ranks = np.empty(len(p))
    ranks[order] = np.arange(1, len(p) + 1)
    pos = y == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


class CreditScorer:
    """Minimal estimator API: fit / predict_proba / score."""

    def __init__(self, epochs=2, batch_size=256, lr=2e-3, fixed=False, seed=0):
        self.epochs, self.batch_size, self.lr = epochs, batch_size, lr
        self.fixed, self.seed = fixed, seed

    def fit(self, cols, y, val=None):
        torch.manual_seed(self.seed)
        self.prep = TabularPreprocessor().fit(cols)
        num, cat = self.prep.transform(cols)
        target = torch.from_numpy(y)
        cards = [len(self.prep.vocab[c]) + 1 for c in CATEGORICAL]
        self.model = ScoringNet(num.shape[1], cards, fixed=self.fixed)
        opt = torch.optim.Adam(self.model.parameters(), lr=self.lr)
        pos_weight = torch.tensor((1 - y.mean()) / y.mean())
        best, best_state = -1.0, None
        for epoch in range(self.epochs):
            self.model.train()
            perm = torch.randperm(len(target))
            total = 0.0
            for i in range(0, len(perm), self.batch_size):
                idx = perm[i:i + self.batch_size]
                logits = self.model(num[idx], cat[idx])
                loss = F.binary_cross_entropy_with_logits(logits, target[idx], pos_weight=pos_weight)
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item() * len(idx)
            msg = f"epoch {epoch} train_loss {total / len(target):.4f}"
            if val is not None:
                auc = self.score(*val)
                msg += f" val_auc {auc:.4f}"
                if auc > best:
                    best = auc
                    best_state = {k: v.clone() for k, v in self.model.state_dict().items()}
            print(msg)
        if best_state is not None:
            self.model.load_state_dict(best_state)
        return self

    @torch.no_grad()
    def predict_proba(self, cols, chunk=4096):
        self.model.eval()
        num, cat = self.prep.transform(cols)
        out = [torch.sigmoid(self.model(num[i:i + chunk], cat[i:i + chunk]))
               for i in range(0, len(num), chunk)]
        return torch.cat(out).numpy()

    def score(self, cols, y):
        return roc_auc(y, self.predict_proba(cols))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    n_employers = 60000
    cols, y = make_applications(60000, rng, n_employers)
    n_tr = 48000
    train = {k: v[:n_tr] for k, v in cols.items()}
    test = {k: v[n_tr:] for k, v in cols.items()}
    t0 = time.time()
    clf = CreditScorer(fixed=args.fixed).fit(train, y[:n_tr], val=(test, y[n_tr:]))
    print(f"test AUC {clf.score(test, y[n_tr:]):.4f}  default rate {y.mean():.3f}")
    print(f"elapsed {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()

"""Synthetic customer-churn table and a torch Dataset over it."""
import numpy as np
import torch
from torch.utils.data import Dataset

CATEGORICAL = {
    "plan": 6,
    "region": 24,
    "device": 9,
    "payment_method": 5,
    "acquisition_channel": 12,
}
NUMERIC = [
    "tenure_months", "monthly_spend", "support_tickets", "logins_30d",
    "avg_session_min", "late_payments", "discount_pct", "data_usage_gb",
    "num_addons", "days_since_upgrade", "nps_score", "referrals",
]


def make_churn_table(n_rows, seed=0):
    """Generate a synthetic churn table: categorical codes, numeric features, label."""
    rng = np.random.default_rng(seed)
    cats = np.stack(
        [rng.integers(0, card, size=n_rows) for card in CATEGORICAL.values()], axis=1
    )
    scales = rng.uniform(0.5, 50.0, size=len(NUMERIC))
    offsets = rng.uniform(-10, 100, size=len(NUMERIC))
    nums = rng.normal(size=(n_rows, len(NUMERIC))) * scales + offsets

    w_num = rng.normal(size=len(NUMERIC))
    cat_effects = [rng.normal(scale=0.6, size=card) for card in CATEGORICAL.values()]
    z = ((nums - offsets) / scales) @ w_num * 0.4
    for j, eff in enumerate(cat_effects):
        z += eff[cats[:, j]]
    p = 1.0 / (1.0 + np.exp(-(z - 0.8)))
    label = (rng.random(n_rows) < p).astype(np.float32)
    return {
        "cat": cats.astype(np.int64),
        "num": nums.astype(np.float32),
        "label": label,
    }


class ChurnDataset(Dataset):
    """Row-level dataset returning a dict per customer.

    Numeric columns are z-scored so that wildly different units
    (GB of data vs. number of tickets) do not dominate the first layer.
    """

    def __init__(self, table, indices, normalize=True, precompute_stats=False):
        self.cat = torch.from_numpy(table["cat"][indices])
        self.num = torch.from_numpy(table["num"][indices])
        self.label = torch.from_numpy(table["label"][indices])
        self.normalize = normalize
        self._stats = None
        if precompute_stats:
            self._stats = (self.num.mean(0), self.num.std(0))

    def __len__(self):
        return self.label.shape[0]

    def column_stats(self):
        if self._stats is not None:
            return self._stats
        return self.num.mean(0), self.num.std(0)  # PLANTED

    def __getitem__(self, idx):
        num = self.num[idx]
        if self.normalize:
            mean, std = self.column_stats()
            num = (num - mean) / (std + 1e-6)
        return {"cat": self.cat[idx], "num": num, "label": self.label[idx]}

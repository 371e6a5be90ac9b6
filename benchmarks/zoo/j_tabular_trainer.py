"""Train a small tabular regression model (store sales) with categorical
embeddings and engineered numeric features, using a Trainer-style loop."""
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import Dataset, DataLoader

parser = argparse.ArgumentParser()
parser.add_argument("--fixed", action="store_true")
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

torch.manual_seed(0)
rng = np.random.default_rng(0)

N_ROWS = 7000
CAT_CARDINALITIES = {"store": 60, "category": 25, "weekday": 7, "promo_type": 4}


def make_sales_table(n):
    cats = {name: rng.integers(0, card, size=n) for name, card in CAT_CARDINALITIES.items()}
    price = rng.lognormal(2.0, 0.6, size=n)
    discount = rng.uniform(0, 0.4, size=n) * (cats["promo_type"] > 0)
    footfall = rng.poisson(300, size=n).astype(np.float64)
    temperature = rng.normal(15, 8, size=n)
    store_effect = rng.normal(0, 1, size=CAT_CARDINALITIES["store"])[cats["store"]]
    cat_effect = rng.normal(0, 0.5, size=CAT_CARDINALITIES["category"])[cats["category"]]
    weekend = (cats["weekday"] >= 5).astype(np.float64)
    units = (np.log1p(footfall) * 0.8 - 0.5 * np.log(price) + 2.0 * discount
             + 0.4 * weekend + store_effect + cat_effect
             + 0.02 * temperature + rng.normal(0, 0.3, size=n))
    numeric = np.stack([price, discount, footfall, temperature], axis=1)
    cat_matrix = np.stack([cats[k] for k in CAT_CARDINALITIES], axis=1)
    return cat_matrix, numeric, units


class SalesDataset(Dataset):
    def __init__(self, cat_matrix, numeric, target, fixed=False):
        self.cats = torch.as_tensor(cat_matrix, dtype=torch.long)
        self.raw = torch.as_tensor(numeric, dtype=torch.float32)
        self.target = torch.as_tensor(target, dtype=torch.float32)
        self.fixed = fixed
        if fixed:
            self._cached_stats = self._compute_stats()

    def engineer(self, raw):
        price, discount, footfall, temp = raw.unbind(-1)
        return torch.stack([
            torch.log(price),
            discount,
            torch.log1p(footfall),
            temp,
            price * (1 - discount),
            torch.sin(temp / 10.0),
        ], dim=-1)

    def _compute_stats(self):
        feats = self.engineer(self.raw)
        return feats.mean(0), feats.std(0).clamp_min(1e-6)

    @property
    def stats(self):
        if self.fixed:
            return self._cached_stats
        return self._compute_stats()  # PLANTED

    def __len__(self):
        return len(self.target)

    def __getitem__(self, idx):
        mean, std = self.stats
        feats = (self.engineer(self.raw[idx]) - mean) / std
        return self.cats[idx], feats, self.target[idx]


class TabularNet(nn.Module):
    def __init__(self, cardinalities, n_numeric, hidden=128):
        super().__init__()
        self.embeddings = nn.ModuleList(
            nn.Embedding(card, min(16, (card + 1) // 2)) for card in cardinalities)
        emb_dim = sum(e.embedding_dim for e in self.embeddings)
        self.mlp = nn.Sequential(
            nn.Linear(emb_dim + n_numeric, hidden), nn.ReLU(), nn.Dropout(0.1),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, 1))

    def forward(self, cats, numeric):
        embs = [emb(cats[:, i]) for i, emb in enumerate(self.embeddings)]
        return self.mlp(torch.cat(embs + [numeric], dim=1)).squeeze(-1)


class Trainer:
    def __init__(self, model, train_loader, val_loader, lr=3e-3):
        self.model = model
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
        self.loss_fn = nn.MSELoss()

    def train_epoch(self):
        self.model.train()
        total, count = 0.0, 0
        for cats, feats, y in self.train_loader:
            self.opt.zero_grad()
            loss = self.loss_fn(self.model(cats, feats), y)
            loss.backward()
            self.opt.step()
            total += loss.item() * len(y)
            count += len(y)
        return total / count

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        se, count = 0.0, 0
        for cats, feats, y in self.val_loader:
            pred = self.model(cats, feats)
            se += ((pred - y) ** 2).sum().item()
            count += len(y)
        return math.sqrt(se / count)

    def fit(self, epochs):
        for epoch in range(epochs):
            train_mse = self.train_epoch()
            val_rmse = self.evaluate()
            print(f"epoch {epoch}: train_mse={train_mse:.4f} val_rmse={val_rmse:.4f}")
        return val_rmse


def main():
    cat_matrix, numeric, units = make_sales_table(N_ROWS)
    split = int(0.85 * N_ROWS)
    train_ds = SalesDataset(cat_matrix[:split], numeric[:split], units[:split], fixed=args.fixed)
    val_ds = SalesDataset(cat_matrix[split:], numeric[split:], units[split:], fixed=args.fixed)
    g = torch.Generator().manual_seed(0)
    train_loader = DataLoader(train_ds, batch_size=128, shuffle=True, generator=g)
    val_loader = DataLoader(val_ds, batch_size=512)
    model = TabularNet(list(CAT_CARDINALITIES.values()), n_numeric=6)
    trainer = Trainer(model, train_loader, val_loader)
    rmse = trainer.fit(args.epochs)
    print(f"final validation RMSE: {rmse:.4f}")


if __name__ == "__main__":
    main()

"""Two-tower retrieval model trained with in-batch negatives.

A LightningModule-style recommender (training_step / validation_step /
configure_optimizers hooks) driven by a small home-made Trainer, so the model
code can move to Lightning later without changes. Interactions are synthetic:
users have a taste cluster, items belong to clusters and have Zipfian
popularity inside them. Validation reports recall@k of each user's held-out
item against the full catalogue.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# --------------------------------------------------------------------------
# synthetic data
# --------------------------------------------------------------------------
def make_interactions(n_users, n_items, n_clusters, n_train, seed=0):
    rng = np.random.default_rng(seed)
    item_cluster = rng.integers(0, n_clusters, size=n_items)
    item_price = rng.integers(0, 16, size=n_items)               # price bucket
    # Zipfian popularity of each item inside its cluster
    pop = 1.0 / (1.0 + rng.permutation(n_items) % 400) ** 1.1
    members = [np.flatnonzero(item_cluster == c) for c in range(n_clusters)]
    member_p = [pop[m] / pop[m].sum() for m in members]

    user_cluster = rng.integers(0, n_clusters, size=n_users)
    # coarse, noisy side information about taste (e.g. a region code)
    user_region = np.where(rng.random(n_users) < 0.7, user_cluster // 4,
                           rng.integers(0, n_clusters // 4, size=n_users))
    user_age = rng.integers(0, 8, size=n_users)

    def sample(users):
        taste = np.where(rng.random(len(users)) < 0.85, user_cluster[users],
                         rng.integers(0, n_clusters, size=len(users)))
        items = np.empty(len(users), dtype=np.int64)
        for c in range(n_clusters):
            idx = np.flatnonzero(taste == c)
            items[idx] = rng.choice(members[c], size=len(idx), p=member_p[c])
        return items

    # heavy-tailed activity: a few users interact a lot
    activity = rng.pareto(1.5, size=n_users) + 1.0
    train_users = rng.choice(n_users, size=n_train, p=activity / activity.sum())
    train_items = sample(train_users)
    val_users = rng.choice(np.unique(train_users), size=min(2048, n_users), replace=False)
    val_items = sample(val_users)

    t = lambda a: torch.as_tensor(a, dtype=torch.long)
    return dict(
        train=dict(user=t(train_users), item=t(train_items)),
        val=dict(user=t(val_users), item=t(val_items)),
        user_feats=torch.stack([t(user_region), t(user_age)], 1),
        item_feats=torch.stack([t(item_cluster), t(item_price)], 1),
    )


class BatchIterator:
    """Shuffled mini-batches over column tensors (one gather per batch)."""

    def __init__(self, columns, batch_size, shuffle, seed=0, drop_last=False):
        self.columns, self.batch_size = columns, batch_size
        self.shuffle, self.drop_last = shuffle, drop_last
        self.n = len(next(iter(columns.values())))
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self):
        full = self.n // self.batch_size
        return full if self.drop_last or self.n % self.batch_size == 0 else full + 1

    def __iter__(self):
        order = torch.randperm(self.n, generator=self.gen) if self.shuffle else torch.arange(self.n)
        for b in range(len(self)):
            idx = order[b * self.batch_size:(b + 1) * self.batch_size]
            yield {k: v[idx] for k, v in self.columns.items()}


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
class Tower(nn.Module):
    def __init__(self, n_ids, feat_cards, id_dim, feat_dim, hidden, out_dim, sparse_grad):
        super().__init__()
        self.id_emb = nn.Embedding(n_ids, id_dim, sparse=sparse_grad)  # PLANTED
        self.feat_embs = nn.ModuleList(nn.Embedding(c, feat_dim) for c in feat_cards)
        in_dim = id_dim + feat_dim * len(feat_cards)
        self.mlp = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(),
                                 nn.Linear(hidden, out_dim))

    def forward(self, ids, feats):
        parts = [self.id_emb(ids)] + [emb(feats[:, j]) for j, emb in enumerate(self.feat_embs)]
        return F.normalize(self.mlp(torch.cat(parts, dim=-1)), dim=-1)


class LitTwoTower(nn.Module):
    def __init__(self, n_users, n_items, user_feats, item_feats, item_log_q,
                 id_dim=64, feat_dim=16, hidden=128, out_dim=64,
                 temperature=0.2, lr=0.3, k=10, sparse_grad=False):
        super().__init__()
        self.hparams = dict(id_dim=id_dim, feat_dim=feat_dim, hidden=hidden, out_dim=out_dim,
                            temperature=temperature, lr=lr, k=k)
        ucards = [int(user_feats[:, j].max()) + 1 for j in range(user_feats.shape[1])]
        icards = [int(item_feats[:, j].max()) + 1 for j in range(item_feats.shape[1])]
        self.user_tower = Tower(n_users, ucards, id_dim, feat_dim, hidden, out_dim, sparse_grad)
        self.item_tower = Tower(n_items, icards, id_dim, feat_dim, hidden, out_dim, sparse_grad)
        self.register_buffer("user_feats", user_feats)
        self.register_buffer("item_feats", item_feats)
        self.register_buffer("item_log_q", item_log_q)   # log sampling prob, for logQ correction
        self._catalogue = None

    def encode_users(self, users):
        return self.user_tower(users, self.user_feats[users])

    def encode_items(self, items):
        return self.item_tower(items, self.item_feats[items])

    # ---- Lightning-style hooks -------------------------------------------
    def training_step(self, batch, batch_idx):
        u = self.encode_users(batch["user"])
        v = self.encode_items(batch["item"])
        logits = u @ v.T / self.hparams["temperature"]
        # in-batch negatives are sampled by popularity: correct with log Q(item)
        logits = logits - self.item_log_q[batch["item"]][None, :]
        # the same item can appear twice in a batch: do not treat it as a negative
        dup = batch["item"][None, :] == batch["item"][:, None]
        dup.fill_diagonal_(False)
        logits = logits.masked_fill(dup, float("-inf"))
        labels = torch.arange(len(u))
        return F.cross_entropy(logits, labels)

    def on_validation_epoch_start(self):
        items = torch.arange(self.item_feats.shape[0])
        self._catalogue = torch.cat([self.encode_items(chunk) for chunk in items.split(8192)])

    def validation_step(self, batch, batch_idx):
        u = self.encode_users(batch["user"])
        scores = u @ self._catalogue.T
        topk = scores.topk(self.hparams["k"], dim=1).indices
        hits = (topk == batch["item"][:, None]).any(dim=1)
        return {"hits": hits.sum().item(), "n": len(u)}

    def on_validation_epoch_end(self, outputs):
        self._catalogue = None
        return sum(o["hits"] for o in outputs) / max(1, sum(o["n"] for o in outputs))

    def configure_optimizers(self):
        return torch.optim.Adagrad(self.parameters(), lr=self.hparams["lr"],
                                   initial_accumulator_value=0.1)


# --------------------------------------------------------------------------
# trainer
# --------------------------------------------------------------------------
class Trainer:
    def __init__(self, max_epochs, log_every_n_steps=100):
        self.max_epochs = max_epochs
        self.log_every_n_steps = log_every_n_steps
        self.history = []

    def fit(self, model, train_loader, val_loader):
        optimizer = model.configure_optimizers()
        step = 0
        for epoch in range(self.max_epochs):
            model.train()
            t0, running, seen = time.perf_counter(), 0.0, 0
            for batch_idx, batch in enumerate(train_loader):
                loss = model.training_step(batch, batch_idx)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                running += loss.item()
                seen += 1
                step += 1
                if step % self.log_every_n_steps == 0:
                    print(f"  epoch {epoch} step {step:4d}  loss {running / seen:.4f}")
            recall = self.validate(model, val_loader)
            self.history.append((epoch, running / seen, recall))
            print(f"epoch {epoch}: train_loss {running / seen:.4f}  "
                  f"val recall@{model.hparams['k']} {recall:.4f}  "
                  f"({time.perf_counter() - t0:.1f}s)")
        return self.history

    @torch.no_grad()
    def validate(self, model, val_loader):
        model.eval()
        model.on_validation_epoch_start()
        outputs = [model.validation_step(b, i) for i, b in enumerate(val_loader)]
        return model.on_validation_epoch_end(outputs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--users", type=int, default=200_000)
    p.add_argument("--items", type=int, default=20_000)
    p.add_argument("--clusters", type=int, default=200)
    p.add_argument("--interactions", type=int, default=12_000)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.3)
    p.add_argument("--temperature", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads (shared box)")
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    data = make_interactions(args.users, args.items, args.clusters, args.interactions, args.seed)
    counts = torch.bincount(data["train"]["item"], minlength=args.items).double() + 1.0
    item_log_q = (counts / counts.sum()).log().float()
    print(f"data: {args.users} users, {args.items} items, "
          f"{len(data['train']['user'])} train / {len(data['val']['user'])} val interactions "
          f"({time.perf_counter() - t0:.1f}s)")

    train_loader = BatchIterator(data["train"], args.batch_size, shuffle=True,
                                 seed=args.seed, drop_last=True)
    val_loader = BatchIterator(data["val"], 1024, shuffle=False)
    model = LitTwoTower(args.users, args.items, data["user_feats"], data["item_feats"],
                        item_log_q, temperature=args.temperature, lr=args.lr, sparse_grad=args.fixed)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.1f}M parameters")

    trainer = Trainer(max_epochs=args.epochs, log_every_n_steps=10)
    history = trainer.fit(model, train_loader, val_loader)
    best = max(history, key=lambda h: h[2])
    print(f"best recall@10 {best[2]:.4f} at epoch {best[0]}; "
          f"total {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()

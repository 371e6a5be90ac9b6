"""Interaction log loading and batch encoding for the implicit-feedback recommender."""
import random

import torch


def make_synthetic_log(n_users, n_items, n_events, seed=0):
    """Fake clickstream: (user_key, sku) pairs with a popularity skew."""
    rng = random.Random(seed)
    catalogue = [f"SKU-{i:07d}" for i in range(n_items)]
    users = [f"u{i:06d}" for i in range(n_users)]
    weights = [1.0 / (1 + i) ** 0.6 for i in range(n_items)]
    items = rng.choices(catalogue, weights=weights, k=n_events)
    events = [(rng.choice(users), sku) for sku in items]
    return users, catalogue, events


class BatchEncoder:
    """Turns raw (user_key, sku) events into index tensors plus sampled negatives."""

    def __init__(self, users, catalogue, n_neg=4, fixed=False, seed=0):
        self.users = users
        self.catalogue = catalogue
        self.n_neg = n_neg
        self.fixed = fixed
        self.gen = torch.Generator().manual_seed(seed)
        self.user_index = {u: i for i, u in enumerate(users)}
        self.item_index = self._build_item_index() if fixed else None

    def _build_item_index(self):
        # deterministic ordering so that embedding rows are stable across runs
        return {sku: i for i, sku in enumerate(sorted(self.catalogue))}

    def encode(self, events):
        if self.fixed:
            item_index = self.item_index
        else:
            item_index = self._build_item_index()  # PLANTED
        u = torch.tensor([self.user_index[e[0]] for e in events], dtype=torch.long)
        pos = torch.tensor([item_index[e[1]] for e in events], dtype=torch.long)
        neg = torch.randint(0, len(self.catalogue), (len(events), self.n_neg), generator=self.gen)
        return u, pos, neg


def iterate_batches(events, batch_size, seed):
    rng = random.Random(seed)
    order = list(range(len(events)))
    rng.shuffle(order)
    for s in range(0, len(order) - batch_size + 1, batch_size):
        yield [events[j] for j in order[s:s + batch_size]]

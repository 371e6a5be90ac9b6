import numpy as np
import torch
from torch.utils.data import Dataset, DataLoader, BatchSampler, RandomSampler, SequentialSampler


def synthesize_interactions(cfg):
    """Implicit-feedback clicks drawn from a hidden low-rank preference model."""
    rng = np.random.default_rng(cfg.seed)
    user_f = rng.normal(size=(cfg.num_users, cfg.latent_dim)).astype(np.float32)
    item_f = rng.normal(size=(cfg.num_items, cfg.latent_dim)).astype(np.float32)
    item_pop = rng.zipf(1.6, size=cfg.num_items).clip(max=50).astype(np.float32)
    users = rng.integers(0, cfg.num_users, size=cfg.num_interactions)
    items = rng.choice(cfg.num_items, size=cfg.num_interactions, p=item_pop / item_pop.sum())
    affinity = (user_f[users] * item_f[items]).sum(1) / np.sqrt(cfg.latent_dim)
    clicked = (rng.random(cfg.num_interactions) < 1.0 / (1.0 + np.exp(-3.0 * affinity))).astype(np.float32)
    hour = rng.integers(0, 24, size=cfg.num_interactions)
    item_category = rng.integers(0, cfg.num_categories, size=cfg.num_items)
    user_region = rng.integers(0, cfg.num_regions, size=cfg.num_users)
    return users, items, hour, item_category[items], user_region[users], clicked


class InteractionDataset(Dataset):
    def __init__(self, users, items, hour, category, region, clicked):
        self.users = torch.as_tensor(users, dtype=torch.long)
        self.items = torch.as_tensor(items, dtype=torch.long)
        self.hour = torch.as_tensor(hour, dtype=torch.long)
        self.category = torch.as_tensor(category, dtype=torch.long)
        self.region = torch.as_tensor(region, dtype=torch.long)
        self.clicked = torch.as_tensor(clicked, dtype=torch.float32)

    def __len__(self):
        return self.users.shape[0]

    def __getitem__(self, idx):
        return {
            "user": self.users[idx],
            "item": self.items[idx],
            "hour": self.hour[idx],
            "category": self.category[idx],
            "region": self.region[idx],
            "label": self.clicked[idx],
        }


class RecDataModule:
    def __init__(self, cfg, fixed=False):
        self.cfg = cfg
        self.fixed = fixed
        columns = synthesize_interactions(cfg)
        n_val = int(len(columns[0]) * cfg.val_fraction)
        self.train_ds = InteractionDataset(*(c[n_val:] for c in columns))
        self.val_ds = InteractionDataset(*(c[:n_val] for c in columns))

    def _loader(self, ds, shuffle, generator=None):
        if self.fixed:
            base = RandomSampler(ds, generator=generator) if shuffle else SequentialSampler(ds)
            return DataLoader(ds, sampler=BatchSampler(base, self.cfg.batch_size, drop_last=False), batch_size=None,
                              generator=generator)
        return DataLoader(ds, batch_size=self.cfg.batch_size, shuffle=shuffle, generator=generator)  # PLANTED

    def train_dataloader(self, epoch):
        g = torch.Generator().manual_seed(self.cfg.seed + epoch)
        return self._loader(self.train_ds, shuffle=True, generator=g)

    def val_dataloader(self):
        return self._loader(self.val_ds, shuffle=False)

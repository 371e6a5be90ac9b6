from dataclasses import dataclass


@dataclass
class RecConfig:
    num_users: int = 3000
    num_items: int = 1200
    num_categories: int = 40
    num_regions: int = 12
    num_interactions: int = 160_000
    latent_dim: int = 8
    embed_dim: int = 32
    hidden_dims: tuple = (64, 32)
    batch_size: int = 1024
    epochs: int = 3
    lr: float = 3e-3
    weight_decay: float = 0.0
    val_fraction: float = 0.1
    seed: int = 1234
    log_every: int = 50

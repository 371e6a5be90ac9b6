from dataclasses import dataclass, field


@dataclass
class ForecastConfig:
    num_sensors: int = 6
    series_length: int = 6000
    context_len: int = 48
    horizon: int = 12
    hidden_size: int = 64
    batch_size: int = 64
    max_epochs: int = 2
    lr: float = 2e-3
    grad_clip: float = 1.0
    val_fraction: float = 0.15
    stride: int = 1
    train_subsample: int = 2560
    patience: int = 3
    seed: int = 2024
    calendar_features: list = field(default_factory=lambda: ["hour_sin", "hour_cos", "dow_sin", "dow_cos"])

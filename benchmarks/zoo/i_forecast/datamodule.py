import math

import torch
from torch.utils.data import Dataset, DataLoader


def make_sensor_series(cfg):
    """Hourly load from several correlated sensors: daily + weekly cycles, trend, AR noise."""
    g = torch.Generator().manual_seed(cfg.seed)
    t = torch.arange(cfg.series_length, dtype=torch.float32)
    hour = 2 * math.pi * (t % 24) / 24
    dow = 2 * math.pi * (t % 168) / 168
    phase = torch.rand(cfg.num_sensors, generator=g) * 2 * math.pi
    amp = 1.0 + torch.rand(cfg.num_sensors, generator=g)
    base = amp[:, None] * torch.sin(hour[None] + phase[:, None]) + 0.5 * torch.sin(dow[None])
    noise = torch.zeros(cfg.num_sensors, cfg.series_length)
    eps = 0.2 * torch.randn(cfg.num_sensors, cfg.series_length, generator=g)
    for i in range(1, cfg.series_length):
        noise[:, i] = 0.8 * noise[:, i - 1] + eps[:, i]
    values = (base + 1e-4 * t[None] + noise).T.contiguous()
    calendar = torch.stack([torch.sin(hour), torch.cos(hour), torch.sin(dow), torch.cos(dow)], dim=1)
    return values, calendar


class WindowDataset(Dataset):
    def __init__(self, values, calendar, starts, context_len, horizon):
        self.values, self.calendar = values, calendar
        self.starts = starts
        self.context_len, self.horizon = context_len, horizon

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, i):
        s = int(self.starts[i])
        c, h = self.context_len, self.horizon
        past = torch.cat([self.values[s:s + c], self.calendar[s:s + c]], dim=1)
        future_cal = self.calendar[s + c:s + c + h]
        target = self.values[s + c:s + c + h]
        return past, future_cal, target


class SensorDataModule:
    def __init__(self, cfg):
        self.cfg = cfg
        values, calendar = make_sensor_series(cfg)
        split = int(cfg.series_length * (1 - cfg.val_fraction))
        mean, std = values[:split].mean(0), values[:split].std(0)
        self.values = (values - mean) / std
        self.calendar = calendar
        window = cfg.context_len + cfg.horizon
        train_starts = torch.arange(0, split - window, cfg.stride)
        g = torch.Generator().manual_seed(cfg.seed)
        train_starts = train_starts[torch.randperm(len(train_starts), generator=g)[: cfg.train_subsample]]
        val_starts = torch.arange(split, cfg.series_length - window, cfg.horizon)
        self.train_set = WindowDataset(self.values, calendar, train_starts, cfg.context_len, cfg.horizon)
        self.val_set = WindowDataset(self.values, calendar, val_starts, cfg.context_len, cfg.horizon)

    def train_dataloader(self, epoch):
        g = torch.Generator().manual_seed(self.cfg.seed + epoch)
        return DataLoader(self.train_set, batch_size=self.cfg.batch_size, shuffle=True, generator=g, drop_last=True)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=256)

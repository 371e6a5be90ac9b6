"""Activity recognition from variable-length sensor windows, in the style of a LightningModule
(training_step / configure_optimizers / train_dataloader) driven by a small Trainer.

The collate function pads each window element by element in Python lists.
--fixed pads with torch.nn.utils.rnn.pad_sequence."""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

FIXED = False


class SensorWindows(Dataset):
    """Three-axis accelerometer windows of 400-1600 samples, six activity classes."""

    def __init__(self, n: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.windows, self.labels = [], []
        for _ in range(n):
            label = int(torch.randint(0, 6, (1,), generator=g))
            length = int(torch.randint(400, 1600, (1,), generator=g))
            t = torch.arange(length) / 50.0
            signal = torch.stack([torch.sin(t * (label + 1 + k)) for k in range(3)], dim=1)
            self.windows.append(signal + 0.3 * torch.randn(length, 3, generator=g))
            self.labels.append(label)

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int):
        return self.windows[i], self.labels[i]


def pad_collate(batch):
    windows, labels = zip(*batch)
    if FIXED:
        x = pad_sequence(windows, batch_first=True)
        mask = torch.arange(x.shape[1])[None, :] < torch.tensor([len(w) for w in windows])[:, None]
    else:
        longest = max(len(w) for w in windows)
        rows = [w.tolist() + [[0.0, 0.0, 0.0]] * (longest - len(w)) for w in windows]  # PLANTED
        x = torch.tensor(rows)
        mask = torch.tensor([[1] * len(w) + [0] * (longest - len(w)) for w in windows], dtype=torch.bool)
    return x, mask, torch.tensor(labels)


class ActivityModule(torch.nn.Module):
    def __init__(self, lr: float = 3e-3):
        super().__init__()
        self.lr = lr
        self.conv = torch.nn.Sequential(torch.nn.Conv1d(3, 32, 9, padding=4), torch.nn.ReLU(),
                                        torch.nn.Conv1d(32, 32, 9, padding=4, stride=4), torch.nn.ReLU())
        self.head = torch.nn.Linear(32, 6)

    def forward(self, x, mask):
        h = self.conv(x.transpose(1, 2))
        keep = mask[:, ::4][:, :h.shape[2]].unsqueeze(1)
        return self.head((h * keep).sum(2) / keep.sum(2))

    def training_step(self, batch, batch_idx):
        x, mask, y = batch
        loss = F.cross_entropy(self(x, mask), y)
        return {"loss": loss}

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr, foreach=True)

    def train_dataloader(self):
        return DataLoader(SensorWindows(384), batch_size=32, shuffle=True, collate_fn=pad_collate,
                          generator=torch.Generator().manual_seed(0))


class Trainer:
    def __init__(self, max_epochs: int, log_every_n_steps: int = 10):
        self.max_epochs = max_epochs
        self.log_every_n_steps = log_every_n_steps
        self.global_step = 0

    def fit(self, module: ActivityModule) -> None:
        optimizer = module.configure_optimizers()
        loader = module.train_dataloader()
        module.train()
        for epoch in range(self.max_epochs):
            for batch_idx, batch in enumerate(loader):
                out = module.training_step(batch, batch_idx)
                optimizer.zero_grad(set_to_none=True)
                out["loss"].backward()
                optimizer.step()
                self.global_step += 1
                if self.global_step % self.log_every_n_steps == 0:
                    print(f"epoch {epoch} step {self.global_step} loss {out['loss'].item():.4f}")


def main() -> None:
    global FIXED
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--fixed", action="store_true", help="pad with pad_sequence")
    args = ap.parse_args()
    FIXED = args.fixed
    torch.manual_seed(0)
    Trainer(max_epochs=args.epochs).fit(ActivityModule())


if __name__ == "__main__":
    main()

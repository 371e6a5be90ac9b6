"""Shape classification in the style of a LightningModule (training_step, validation_step,
configure_optimizers, dataloaders) driven by a small Trainer, written well: data prepared
once as tensors, batched augmentation, foreach AdamW, gradients set to None, validation under
inference_mode. A clean program: nothing planted."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def shapes(n: int, size: int = 32, seed: int = 0) -> TensorDataset:
    """Discs, squares and crosses of random size and place, with noise."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    labels = torch.randint(0, 3, (n,), generator=g)
    cy, cx = torch.randint(10, size - 10, (2, n, 1, 1), generator=g)
    r = torch.randint(4, 9, (n, 1, 1), generator=g)
    dy, dx = (yy - cy).abs(), (xx - cx).abs()
    disc = dy ** 2 + dx ** 2 < r ** 2
    square = (dy < r) & (dx < r)
    cross = ((dy < 2) & (dx < r)) | ((dx < 2) & (dy < r))
    img = torch.where(labels[:, None, None] == 0, disc, torch.where(labels[:, None, None] == 1, square, cross))
    images = img.float()[:, None] + 0.2 * torch.randn(n, 1, size, size, generator=g)
    return TensorDataset(images, labels)


class ShapeModule(torch.nn.Module):
    def __init__(self, lr: float = 2e-3):
        super().__init__()
        self.lr = lr
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(), torch.nn.Linear(64, 3))
        self.data = shapes(4096)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        flip = torch.rand(len(x), 1, 1, 1) < 0.5
        x = torch.where(flip, x.flip(-1), x)
        return F.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return (self(x).argmax(1) == y).float().sum()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr, foreach=True)

    def train_dataloader(self):
        return DataLoader(TensorDataset(*(t[:3584] for t in self.data.tensors)), batch_size=64, shuffle=True,
                          generator=torch.Generator().manual_seed(0))

    def val_dataloader(self):
        return DataLoader(TensorDataset(*(t[3584:] for t in self.data.tensors)), batch_size=256)


class Trainer:
    def __init__(self, max_epochs: int):
        self.max_epochs = max_epochs

    def fit(self, module: ShapeModule) -> None:
        optimizer = module.configure_optimizers()
        for epoch in range(self.max_epochs):
            module.train()
            for batch_idx, batch in enumerate(module.train_dataloader()):
                loss = module.training_step(batch, batch_idx)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            module.eval()
            with torch.inference_mode():
                correct = sum(module.validation_step(b, i) for i, b in enumerate(module.val_dataloader()))
            print(f"epoch {epoch}: last loss {loss.item():.4f}  val acc {float(correct) / 512:.3f}")


def main() -> None:
    torch.manual_seed(0)
    Trainer(max_epochs=3).fit(ShapeModule())


if __name__ == "__main__":
    main()

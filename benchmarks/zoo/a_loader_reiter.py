"""Step-based training (a fixed number of steps, not epochs) with a multi-process DataLoader.

Each step takes its batch with next(iter(loader)): a new iterator every step, which starts
two fresh worker processes and has them prefetch four batches, of which one is used.
--fixed creates the iterator once and starts a new pass when one ends."""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class Spectra(Dataset):
    """Synthetic 1-D spectra: a few peaks whose positions depend on the class."""

    def __init__(self, n: int, length: int = 512, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 5, (n,), generator=g)
        self.shifts = torch.randint(-8, 9, (n,), generator=g)
        self.noise_seeds = torch.randint(0, 2**31 - 1, (n,), generator=g)
        self.axis = torch.arange(length, dtype=torch.float32)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        label = int(self.labels[i])
        centers = torch.tensor([60.0, 180.0, 300.0, 420.0]) + 20 * label + float(self.shifts[i])
        peaks = torch.exp(-((self.axis[None, :] - centers[:, None]) / 6.0) ** 2).sum(0)
        noise = torch.randn(len(self.axis), generator=torch.Generator().manual_seed(int(self.noise_seeds[i])))
        return (peaks + 0.05 * noise)[None], label


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--fixed", action="store_true", help="one iterator for the whole run")
    args = ap.parse_args()
    torch.manual_seed(0)
    loader = DataLoader(Spectra(4096), batch_size=64, shuffle=True, num_workers=2,
                        generator=torch.Generator().manual_seed(0))
    model = torch.nn.Sequential(torch.nn.Conv1d(1, 16, 9, stride=2), torch.nn.ReLU(),
                                torch.nn.Conv1d(16, 32, 9, stride=2), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(32, 5))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, foreach=True)
    it = iter(loader) if args.fixed else None
    for step in range(args.steps):
        if it is not None:
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(loader)
                x, y = next(it)
        else:
            x, y = next(iter(loader))  # PLANTED
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 20 == 19:
            print(f"step {step + 1}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

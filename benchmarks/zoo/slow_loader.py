"""A Dataset doing heavy per-sample Python work, loaded in the main process (num_workers=0)."""
import math
import sys

import torch
from torch.utils.data import DataLoader, Dataset

FIXED = "--fixed" in sys.argv


class Slow(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        v = [math.sin(i * k) for k in range(64 if FIXED else 12000)]  # PLANTED
        return torch.tensor(v[:64], dtype=torch.float32), torch.tensor(float(i % 2))


model = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Slow(), batch_size=32, num_workers=0)
for step, (x, y) in enumerate(loader):
    loss = (model(x).squeeze(1) - y).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if step == 80:
        break

"""Trains a small classifier and logs a robust running loss: the median of every per-sample loss
seen so far, recomputed at every step from the whole history (PLANTED), so each step
concatenates and sorts more than the last. The fix keeps a bounded window of recent losses."""
import sys
from collections import deque

import torch


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(1024, 32), torch.randint(0, 4, (1024,))
    history = deque(maxlen=20) if "--fixed" in sys.argv else []
    for step in range(500):
        per_sample = torch.nn.functional.cross_entropy(model(x), y, reduction="none")
        opt.zero_grad()
        per_sample.mean().backward()
        opt.step()
        history.append(per_sample.detach())
        running = torch.cat(list(history)).median()  # PLANTED
    print(f"running median loss {running.item():.4f}")


if __name__ == "__main__":
    main()

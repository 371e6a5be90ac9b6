"""A loop of many tiny tensor ops with no optimizer, no DataLoader and no nn.Module: no step clock
ticks. Bare: ~1 M ops in a few seconds. torchneck must profile a bounded slice of it (a
whole-run profile of this loop took 9x the bare time and 3.4 GB)."""
import sys

import torch

iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 60_000
x = torch.randn(64)
acc = torch.zeros(64)
for _ in range(iterations):
    acc = acc * 0.99 + x.sin() * 0.01  # PLANTED
print(f"checksum {float(acc.sum()):.4f}")

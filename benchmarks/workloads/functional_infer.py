"""Inference with plain tensors and torch.nn.functional, no nn.Module: no step clock (~3 s bare)."""
import torch
import torch.nn.functional as F

g = torch.Generator().manual_seed(0)
w1, b1 = torch.randn(512, 256, generator=g) * 0.05, torch.zeros(512)
w2, b2 = torch.randn(10, 512, generator=g) * 0.05, torch.zeros(10)
with torch.inference_mode():
    hits = 0
    for _ in range(1000):
        x = torch.randn(64, 256, generator=g)
        logits = F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)
        hits += int((logits.argmax(dim=1) == 3).sum())
print(hits)

"""Turns on the switches a misconfiguration check looks for, then does a little work."""
import torch

torch.backends.cudnn.benchmark = True
torch.set_float32_matmul_precision("high")
torch.use_deterministic_algorithms(True, warn_only=True)
torch.autograd.set_detect_anomaly(True)
model = torch.nn.Linear(16, 16)
for _ in range(4):
    model(torch.randn(4, 16)).sum().backward()

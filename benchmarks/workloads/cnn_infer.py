"""Inference of a small CNN (~3 s bare)."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
    torch.nn.Flatten(), torch.nn.Linear(32, 10)).eval()
x = torch.randn(32, 3, 64, 64)
with torch.inference_mode():
    for _ in range(60):
        model(x)

"""Inference that builds autograd graphs it never uses (no torch.no_grad / inference_mode)."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU()) for _ in range(8)])
model.eval()
for _ in range(200):
    out = model(torch.randn(64, 256))  # PLANTED

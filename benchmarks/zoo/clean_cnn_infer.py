"""A well-written inference loop: inference_mode, batched, float32."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
    torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
    torch.nn.Flatten(), torch.nn.Linear(64, 10)).eval()
with torch.inference_mode():
    for _ in range(40):
        out = model(torch.randn(16, 3, 64, 64))

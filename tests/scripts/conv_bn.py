"""Three convolutions: one with a bias straight into BatchNorm (the bias is wasted), one without
a bias into BatchNorm (right), one with a bias into ReLU (right)."""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8),  # CONV wasted bias
    nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
    nn.Conv2d(8, 4, 3, padding=1), nn.ReLU(),
)
opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=True)
for _ in range(12):
    loss = model(torch.randn(4, 3, 16, 16)).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()

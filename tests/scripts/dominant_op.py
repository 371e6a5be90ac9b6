import torch

torch.manual_seed(0)
a = torch.randn(700, 700)
b = torch.randn(700, 700)
model = torch.nn.Linear(16, 16)
for step in range(10):
    y = model(torch.randn(4, 16))
    c = torch.mm(a, b)  # PLANTED
    y.sum().item()

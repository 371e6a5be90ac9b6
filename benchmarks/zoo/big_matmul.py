"""One oversized matrix product dominates each training step."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(128, 128)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
a = torch.randn(1200, 1200)
b = torch.randn(1200, 1200)
for _ in range(20):
    loss = model(torch.randn(32, 128)).sum()
    c = a @ b  # PLANTED
    loss = loss + c[0, 0] * 0
    loss.backward()
    opt.step()
    opt.zero_grad()

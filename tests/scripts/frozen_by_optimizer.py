"""A linear probe whose backbone is "frozen" only by leaving it out of the optimizer: it keeps
requires_grad=True, so every backward still computes the backbone's gradients."""
import torch

torch.manual_seed(0)
backbone = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten())
model = torch.nn.Sequential(backbone, torch.nn.Linear(32, 10))
opt = torch.optim.SGD(model[1].parameters(), lr=0.01)  # PLANTED
for step in range(12):
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", round(loss.item(), 3))

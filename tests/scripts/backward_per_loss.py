"""A multi-task model: a shared convolutional trunk and three heads, trained with one backward per
head's loss (retain_graph=True), so the trunk's backward runs three times a step."""
import torch

torch.manual_seed(0)
trunk = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                            torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU())
heads = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                                torch.nn.Linear(32, 4)) for _ in range(3))
opt = torch.optim.SGD([*trunk.parameters(), *heads.parameters()], lr=0.01)
for step in range(12):
    x, y = torch.randn(16, 3, 32, 32), torch.randint(0, 4, (16,))
    features = trunk(x)
    losses = [torch.nn.functional.cross_entropy(head(features), y) for head in heads]
    opt.zero_grad()
    for loss in losses:
        loss.backward(retain_graph=True)  # PLANTED
    opt.step()
print("loss", round(sum(loss.item() for loss in losses), 3))

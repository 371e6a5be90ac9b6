import torch

model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def python_checksum(values):
    total = 0.0
    for v in values:
        total += (v * 1.0001) % 7.0  # PLANTED
    return total


for step in range(12):
    x = torch.randn(32, 64)
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    python_checksum(range(200000))

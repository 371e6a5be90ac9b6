"""Per-row arithmetic on tiny tensors: thousands of small ops per step."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(30):
    x = torch.randn(200, 16)
    y = model(x)
    acc = torch.zeros(16)
    for row in y:
        acc = acc + row.relu() * 0.5 - row.sigmoid()  # PLANTED
    loss = acc.sum()
    loss.backward()
    opt.step()
    opt.zero_grad()

"""Per-sample features computed in a Python loop over plain lists each step."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
rows = [[float(i * j % 7) for j in range(64)] for i in range(2000)]
for _ in range(20):
    feats = [[v * 0.5 + (v > 3) for v in row] for row in rows]  # PLANTED
    x = torch.tensor(feats[:256])
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()

"""Scoring with a model (top-level module calls: the module clock), then two optimizer steps at
the very end: the better clock begins too late for a window of its own steps."""
import torch
torch.manual_seed(0)
enc = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
x = torch.randn(64, 256)
with torch.no_grad():
    for _ in range(400):   # scoring: top-level module calls (the module clock)
        y = enc(x)
opt = torch.optim.SGD(enc.parameters(), lr=0.01)
for _ in range(2):         # then two training steps at the very end
    loss = enc(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("done")

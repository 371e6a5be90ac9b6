"""Eight embedding tables called one by one each step, then an optimizer step: the module clock
ticks eight times a step; its window would hold table lookups, not steps."""
import torch

tables = torch.nn.ModuleList([torch.nn.Embedding(1000, 8) for _ in range(8)])
opt = torch.optim.SGD(tables.parameters(), lr=0.1)
for _ in range(30):
    ids = torch.randint(0, 1000, (64,))
    loss = sum(table(ids).sum() for table in tables)
    loss.backward()
    opt.step()  # PLANTED
    opt.zero_grad()

"""Adam over many parameter tensors (a click model's embedding tables) with the single-tensor
(for-loop) implementation; on CPU the fused implementation updates each tensor in one pass."""
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(0)
CARDINALITIES = [20000] * 26
tables = torch.nn.ModuleList([torch.nn.Embedding(n, 16) for n in CARDINALITIES])
head = torch.nn.Sequential(torch.nn.Linear(16 * len(CARDINALITIES), 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
params = [*tables.parameters(), *head.parameters()]
if "--fixed" in sys.argv:
    opt = torch.optim.Adam(params, lr=1e-3, fused=True)
else:
    opt = torch.optim.Adam(params, lr=1e-3, foreach=False)  # PLANTED
for _ in range(120):
    ids = torch.randint(0, 20000, (256, len(CARDINALITIES)))
    clicks = torch.rand(256).round()
    x = torch.cat([table(ids[:, i]) for i, table in enumerate(tables)], dim=1)
    loss = F.binary_cross_entropy_with_logits(head(x).squeeze(1), clicks)
    loss.backward()
    opt.step()
    opt.zero_grad()

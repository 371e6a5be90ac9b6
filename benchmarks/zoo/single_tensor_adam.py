"""Adam over many small parameters with the single-tensor (for-loop) implementation."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(150)])
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)  # PLANTED
for _ in range(40):
    loss = model(torch.randn(8, 16)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()

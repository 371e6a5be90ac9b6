"""A small MLP whose activation learns one slope per neuron, each its own scalar parameter
(a ParameterList): hundreds of tensors for the optimizer, zero_grad and autograd every step."""
import torch
from torch import nn

torch.manual_seed(0)


class SlopedTanh(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.slopes = nn.ParameterList(nn.Parameter(torch.tensor(1.0)) for _ in range(width))  # PLANTED

    def forward(self, z):
        return torch.tanh(torch.stack(tuple(self.slopes)) * z)


model = nn.Sequential(nn.Linear(2, 64), SlopedTanh(64), nn.Linear(64, 64), SlopedTanh(64),
                      nn.Linear(64, 64), SlopedTanh(64), nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.rand(256, 2), torch.rand(256, 1)
for step in range(150):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.4f}")

"""Training an MLP on synthetic data with a DataLoader (~3 s bare)."""
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(8192, 256), torch.randint(0, 10, (8192,)))
loader = DataLoader(data, batch_size=64, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.Adam(model.parameters())
for _epoch in range(3):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

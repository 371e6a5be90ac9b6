"""A model compiled with torch.compile (the default inductor backend), trained for a few hundred
steps: compile time plus compiled steps."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 10))
opt = torch.optim.Adam(model.parameters())
step = torch.compile(model)
for _ in range(150):
    loss = torch.nn.functional.cross_entropy(step(torch.randn(64, 128)), torch.randint(0, 10, (64,)))
    loss.backward()
    opt.step()
    opt.zero_grad()
print(float(loss.detach()))

"""A compiled model trained with an optimizer: torchneck's own step clock must not make dynamo
recompile it (its global module hooks are withdrawn before dynamo traces)."""
import torch

model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
compiled = torch.compile(model, backend="eager")
for i in range(12):
    loss = compiled(torch.randn(16, 32)).sum()  # COMPILED CALL
    loss.backward()
    opt.step()
    opt.zero_grad()

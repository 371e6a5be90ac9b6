"""Training steps whose one C++ call (torch.unique over the columns of an edge list) runs hundreds
of thousands of internal ops: a single step records far more events than the window's bound."""
import torch

torch.manual_seed(0)
edges = torch.randint(0, 5000, (2, 25_000))
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(8):
    unique_edges = torch.unique(edges, dim=1)
    loss = model(torch.randn(unique_edges.shape[1] // 500, 16)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("steps done")

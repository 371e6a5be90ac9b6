"""A compiled model whose forward prints (a graph break) every call."""
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)])
        self.b = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)])

    def forward(self, x):
        x = self.a(x).relu()
        print("mid", end="\r")  # PLANTED
        return self.b(x).relu()


torch.manual_seed(0)
model = torch.compile(Net(), backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=True)
for _ in range(60):
    loss = model(torch.randn(16, 64)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()

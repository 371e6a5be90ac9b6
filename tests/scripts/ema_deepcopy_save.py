"""A training loop whose EMA callback deep-copies the model every step and which saves the whole
model (pickled) at the end: torchneck's capture must leave the model copyable and picklable."""
import copy
import io

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
ema = copy.deepcopy(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(400):
    x = torch.randn(64, 32)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    snapshot = copy.deepcopy(model)  # PLANTED
    with torch.no_grad():
        for a, b in zip(ema.parameters(), snapshot.parameters()):
            a.lerp_(b, 0.1)
buf = io.BytesIO()
torch.save(model, buf)
print("saved", buf.tell() > 0, "ema", round(float(sum(p.detach().sum() for p in ema.parameters())), 4))

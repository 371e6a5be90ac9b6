"""A well-written small training loop: vectorised, float32, foreach optimizer, set_to_none."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)  # the default on CPU is the per-tensor loop
x_all = torch.randn(4096, 256)
y_all = torch.randint(0, 10, (4096,))
for step in range(60):
    i = (step * 128) % 4096
    logits = model(x_all[i:i + 128])
    loss = torch.nn.functional.cross_entropy(logits, y_all[i:i + 128])
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)

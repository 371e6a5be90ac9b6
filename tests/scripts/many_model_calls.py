"""A model called once per request, 30,000 times: the module clock ticks at every call."""
import torch

torch.manual_seed(0)
model = torch.nn.Linear(8, 2).eval()
requests = torch.randn(30_000, 1, 8)
with torch.inference_mode():
    answers = [model(r) for r in requests]
print(f"answered {len(answers)}")

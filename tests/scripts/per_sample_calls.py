"""Scoring rows one at a time: the model is called per sample inside a comprehension."""
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                            torch.nn.Linear(64, 4)).eval()
rows = torch.randn(40, 128, 32)
with torch.inference_mode():
    for batch in rows:
        scores = torch.cat([model(r[None]) for r in batch])  # PLANTED
print("scored", rows.shape[0] * rows.shape[1])

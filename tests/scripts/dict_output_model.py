"""A model returning a Hugging-Face-style output: a dict whose attributes are its keys
(`__getattr__ = dict.__getitem__`, so a missing attribute raises KeyError, not AttributeError).
Scored without torch.no_grad(): every call builds a graph the program never uses."""
import sys

import torch


class ModelOutput(dict):
    __getattr__ = dict.__getitem__


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 10))

    def forward(self, x):
        return ModelOutput(logits=self.body(x))


torch.manual_seed(0)
model = Classifier().eval()
batches = torch.randn(200, 64, 64)
with torch.no_grad() if "--no-grad" in sys.argv else torch.enable_grad():
    best = [model(x).logits.argmax(-1) for x in batches]  # PLANTED
print(f"scored {sum(len(b) for b in best)} rows")

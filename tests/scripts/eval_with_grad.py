"""An evaluation over a DataLoader that forgets torch.no_grad(): every model call builds an
autograd graph. The loader's clock begins before the first model call; the capture must still
keep one call for the autograd probe. With --no-grad the calls build nothing (no probe)."""
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 10)).eval()
loader = DataLoader(TensorDataset(torch.randn(4096, 64)), batch_size=64)
with torch.no_grad() if "--no-grad" in sys.argv else torch.enable_grad():
    scores = [model(x).softmax(-1) for (x,) in loader]  # PLANTED
print(f"scored {sum(len(s) for s in scores)} rows, training={model.training}")

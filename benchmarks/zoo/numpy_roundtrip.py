"""Each step sends activations through NumPy for a normalisation torch could do in place."""
import numpy as np
import torch

torch.manual_seed(0)
model = torch.nn.Linear(512, 512)
for _ in range(40):
    with torch.no_grad():
        h = model(torch.randn(2048, 512))
        arr = h.numpy()
        arr = (arr - np.median(arr, axis=0)) / (np.percentile(arr, 90, axis=0) + 1e-6)  # PLANTED
        out = torch.from_numpy(arr)

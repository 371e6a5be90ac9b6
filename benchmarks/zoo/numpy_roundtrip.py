"""Each step sends activations through NumPy for a tanh-GELU torch has built in."""
import sys

import numpy as np
import torch

torch.manual_seed(0)
model = torch.nn.Linear(512, 512)
for _ in range(60):
    with torch.no_grad():
        h = model(torch.randn(2048, 512))
        if "--fixed" in sys.argv:
            out = torch.nn.functional.gelu(h, approximate="tanh")
        else:
            arr = h.numpy()
            arr = 0.5 * arr * (1.0 + np.tanh(0.7978845608 * (arr + 0.044715 * arr ** 3)))  # PLANTED
            out = torch.from_numpy(arr)

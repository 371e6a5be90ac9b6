"""Scores sensor readings for anomalies with an autoencoder, chunk by chunk from a generator; the
model is converted to float64 and each chunk (NumPy float64) to the model's dtype: the conversion
is the line to change, before the data's entry through torch.from_numpy."""
import sys

import numpy as np
import torch


class Scorer:
    def __init__(self, dim=256):
        self.net = torch.nn.Sequential(torch.nn.Linear(dim, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 64),
                                       torch.nn.GELU(), torch.nn.Linear(64, 2048), torch.nn.GELU(),
                                       torch.nn.Linear(2048, dim))
        if "--fixed" not in sys.argv:
            self.net = self.net.double()  # PLANTED
        self.net.eval()

    def errors(self, chunk):
        x = torch.from_numpy(chunk).to(next(self.net.parameters()).dtype)
        with torch.no_grad():
            return ((self.net(x) - x) ** 2).mean(1)


def readings(n_chunks, rows=2048, dim=256, seed=0):
    rng = np.random.default_rng(seed)
    for _ in range(n_chunks):
        yield rng.standard_normal((rows, dim))


scorer = Scorer()
flagged = sum(int((scorer.errors(c) > 1.2).sum()) for c in readings(12))
print(flagged)

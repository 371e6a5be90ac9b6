"""Crashes in native code after a few steps (a null pointer read through ctypes)."""
import ctypes

import torch

model = torch.nn.Linear(64, 64)
for _ in range(200):
    model(torch.randn(32, 64))
ctypes.string_at(0)  # PLANTED

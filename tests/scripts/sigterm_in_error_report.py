"""Fails, and sends itself SIGTERM while torchneck turns the error into its report (as torchrun
does to a rank whose peer failed): the evidence must still be written, with the real error."""

import os
import signal

import torch

x = torch.randn(64, 64)
for _ in range(3):
    x = x @ x.T / 64


class Boom(Exception):
    def __str__(self):  # a SIGTERM while torchneck turns the script's error into its report
        os.kill(os.getpid(), signal.SIGTERM)
        return "boom"


raise Boom()

"""Process-wide set-up shared by the training and evaluation entry points."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def setup(seed: int = 0, debug: bool = True) -> None:
    """Seeds, print options, and the autograd checks used while hunting a NaN last month."""
    seed_everything(seed)
    torch.set_printoptions(precision=4, sci_mode=False)
    if debug:
        torch.autograd.set_detect_anomaly(True)  # PLANTED

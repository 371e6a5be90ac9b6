"""Train a click model with a Trainer: a clean program (tensors in memory, fused AdamW,
gradients set to None, evaluation under inference_mode)."""

from __future__ import annotations

import torch
from data import CARDINALITIES, click_dataset
from model import ClickModel
from torch.utils.data import TensorDataset
from trainer import PrintLogs, Trainer


def main() -> None:
    torch.manual_seed(0)
    data = click_dataset(60000)
    train_set = TensorDataset(*(t[:50000] for t in data.tensors))
    val_set = TensorDataset(*(t[50000:] for t in data.tensors))
    trainer = Trainer(ClickModel(13, CARDINALITIES), [PrintLogs()])
    trainer.fit(train_set, val_set, epochs=3)


if __name__ == "__main__":
    main()

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from config import RecConfig  # noqa: E402
from data import RecDataModule  # noqa: E402
from model import NeuralMF  # noqa: E402
from trainer import Trainer, LossLogger, EpochSummary  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description="Train a NeuMF click model on synthetic interactions")
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--epochs", type=int, default=None)
    args = parser.parse_args()

    cfg = RecConfig()
    if args.epochs is not None:
        cfg.epochs = args.epochs
    torch.manual_seed(cfg.seed)

    dm = RecDataModule(cfg, fixed=args.fixed)
    model = NeuralMF(cfg.num_users, cfg.num_items, cfg.num_categories, cfg.num_regions,
                     cfg.embed_dim, cfg.hidden_dims)
    trainer = Trainer(model, dm, cfg, callbacks=[LossLogger(cfg.log_every), EpochSummary()])
    metrics = trainer.fit()
    print(f"final val_loss={metrics['val_loss']:.5f} val_acc={metrics['val_acc']:.4f}")


if __name__ == "__main__":
    main()

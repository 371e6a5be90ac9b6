import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from config import ForecastConfig  # noqa: E402
from datamodule import SensorDataModule  # noqa: E402
from engine import Trainer, NonFiniteLossGuard, EarlyStopping, ProgressPrinter  # noqa: E402
from seq2seq import Seq2SeqForecaster  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description="Multi-horizon sensor load forecasting")
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()

    cfg = ForecastConfig()
    torch.manual_seed(cfg.seed)
    dm = SensorDataModule(cfg)
    model = Seq2SeqForecaster(cfg.num_sensors, len(cfg.calendar_features), cfg.hidden_size, cfg.horizon)
    callbacks = [NonFiniteLossGuard(fixed=args.fixed), EarlyStopping(cfg.patience), ProgressPrinter()]
    trainer = Trainer(model, dm, cfg, callbacks)
    val_mae = trainer.fit()
    print(f"steps={trainer.global_step} final val_mae={val_mae:.5f} best={callbacks[1].best:.5f}")


if __name__ == "__main__":
    main()

"""Fine-tune a multi-horizon load-forecasting head on a frozen pretrained encoder, with checkpoints.

The encoder (an MLP over the last two weeks of hourly readings) stays frozen; only the head
trains. The checkpoint (model, optimizer, step) lets a preempted job resume; it is written
atomically (temporary file, then rename) so a crash mid-write never leaves a broken checkpoint.
"""
import argparse
import math
import os
import tempfile
from pathlib import Path

import torch
from torch import nn

HISTORY = 336  # two weeks of hourly readings
HORIZON = 48


def synthetic_load(n_hours, n_meters, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n_hours, dtype=torch.float32)
    daily = torch.sin(2 * math.pi * t / 24)
    weekly = torch.sin(2 * math.pi * t / 168)
    scale = 1 + torch.rand(n_meters, 1, generator=g)
    return scale * (2 + daily + 0.5 * weekly) + 0.2 * torch.randn(n_meters, n_hours, generator=g)


def save_checkpoint(path, model, opt, step):
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--fixed", action="store_true", help="checkpoint every 50 steps")
    args = ap.parse_args()
    torch.manual_seed(0)
    series = synthetic_load(24 * 120, 64)
    encoder = nn.Sequential(nn.Linear(HISTORY, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU())
    encoder.requires_grad_(False)  # pretrained (random here), frozen
    head = nn.Sequential(nn.Linear(2048, 128), nn.ReLU(), nn.Linear(128, HORIZON))
    model = nn.Sequential(encoder, head)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "forecaster.pt"
        for step in range(args.steps):
            meters = torch.randint(0, series.shape[0], (16,), generator=g)
            starts = torch.randint(0, series.shape[1] - HISTORY - HORIZON, (16,), generator=g)
            windows = torch.stack([series[m, s:s + HISTORY + HORIZON] for m, s in zip(meters, starts)])
            level = windows[:, :HISTORY].mean(1, keepdim=True)
            x, y = windows[:, :HISTORY] / level, windows[:, HISTORY:] / level
            loss = nn.functional.l1_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if (step + 1) % (50 if args.fixed else 1) == 0:  # PLANTED
                save_checkpoint(ckpt, model, opt, step)
            if step % 50 == 0:
                print(f"step {step} MAE {loss.item():.4f}")
        save_checkpoint(ckpt, model, opt, args.steps)
        print(f"checkpoint {ckpt.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()

"""Forecasting the next reading of a sensor from a window of 120 readings, with a custom
recurrent layer that steps an LSTMCell in a Python loop over time: about twenty small ops
per time step, forward and backward.

--fixed uses nn.LSTM (same gate layout; the cell's initial weights are copied into it, so
the training run is the same): one op runs the whole sequence."""

from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F

FIXED = False


class Recurrent(torch.nn.Module):
    def __init__(self, inputs: int, hidden: int):
        super().__init__()
        self.cell = torch.nn.LSTMCell(inputs, hidden)
        if FIXED:
            self.lstm = torch.nn.LSTM(inputs, hidden, batch_first=True)
            with torch.no_grad():
                for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                    getattr(self.lstm, name + "_l0").copy_(getattr(self.cell, name))
            del self.cell

    def forward(self, x):
        if FIXED:
            return self.lstm(x)[0]
        h = c = x.new_zeros(x.shape[0], self.cell.hidden_size)
        outputs = []
        for t in range(x.shape[1]):
            h, c = self.cell(x[:, t], (h, c))  # PLANTED
            outputs.append(h)
        return torch.stack(outputs, 1)


class Forecaster(torch.nn.Module):
    def __init__(self, sensors: int = 6, hidden: int = 48):
        super().__init__()
        self.rnn = Recurrent(sensors, hidden)
        self.head = torch.nn.Linear(hidden, sensors)

    def forward(self, window):
        return self.head(self.rnn(window)[:, -1])


def sensor_series(length: int, sensors: int = 6, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(length, dtype=torch.float32)[:, None]
    periods = torch.tensor([24.0, 36.0, 50.0, 12.0, 72.0, 90.0][:sensors])
    return torch.sin(2 * math.pi * t / periods) + 0.1 * torch.randn(length, sensors, generator=g)


def main() -> None:
    global FIXED
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=250)
    ap.add_argument("--fixed", action="store_true", help="nn.LSTM instead of the stepped cell")
    args = ap.parse_args()
    FIXED = args.fixed
    torch.manual_seed(0)
    series = sensor_series(20000)
    model = Forecaster()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3, foreach=True)
    g = torch.Generator().manual_seed(0)
    for step in range(args.steps):
        starts = torch.randint(0, len(series) - 121, (32,), generator=g)
        windows = torch.stack([series[s:s + 121] for s in starts])
        loss = F.mse_loss(model(windows[:, :-1]), windows[:, -1])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 100 == 99:
            print(f"step {step + 1}: mse {loss.item():.5f}")


if __name__ == "__main__":
    main()

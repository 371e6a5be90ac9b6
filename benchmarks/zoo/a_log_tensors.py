"""A regression training script that logs at DEBUG level every step.

The f-string formats the predictions and gradient tensors on every step, even though DEBUG
records are filtered out. --fixed passes the values as logging arguments, so nothing is
formatted unless DEBUG is enabled."""

from __future__ import annotations

import argparse
import logging

import torch
import torch.nn.functional as F

log = logging.getLogger("train")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--fixed", action="store_true", help="lazy %%-style logging arguments")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    true_w = torch.randn(32, 8, generator=g)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, foreach=True)
    for step in range(args.steps):
        x = torch.randn(128, 32, generator=g)
        y = torch.tanh(x @ true_w) + 0.05 * torch.randn(128, 8, generator=g)
        pred = model(x)
        loss = F.mse_loss(pred, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grads = {name: p.grad for name, p in model.named_parameters()}
        if args.fixed:
            log.debug("step %d loss %s pred %s target %s grads %s", step, loss, pred, y, grads)
        else:
            log.debug(f"step {step} loss {loss} pred {pred} target {y} grads {grads}")  # PLANTED
        opt.step()
        if step % 100 == 99:
            log.info("step %d: loss %.4f", step + 1, loss.item())


if __name__ == "__main__":
    main()

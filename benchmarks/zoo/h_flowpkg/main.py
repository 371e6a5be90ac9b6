"""Train a Glow-style flow on synthetic 640-d data and report test NLL."""
import argparse
import math
import time

import torch

from data import LowRankMixture, batches
from layers import Glow


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--dim", type=int, default=640)
    p.add_argument("--flow-steps", type=int, default=4)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--iters", type=int, default=15)
    p.add_argument("--eval-batch-size", type=int, default=64)
    p.add_argument("--n-test", type=int, default=4096)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--fixed", action="store_true")
    return p.parse_args()


@torch.no_grad()
def evaluate(model, data, batch_size):
    total = 0.0
    for chunk in data.split(batch_size):
        total += -model.log_prob(chunk).sum().item()
    return total / data.shape[0]


def main():
    args = parse_args()
    torch.manual_seed(0)
    dataset = LowRankMixture(args.dim)
    model = Glow(args.dim, args.flow_steps, args.hidden, fixed=args.fixed)
    # data-dependent ActNorm init
    with torch.no_grad():
        model(dataset.sample(512))
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.iters)

    t0 = time.time()
    running = None
    for it, x in enumerate(batches(dataset, args.batch_size, args.iters)):
        loss = -model.log_prob(x).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        opt.step()
        sched.step()
        running = loss.item() if running is None else 0.95 * running + 0.05 * loss.item()
        if (it + 1) % 5 == 0:
            bpd = running / (args.dim * math.log(2))
            print(f"iter {it + 1:4d}  nll {running:9.2f}  bits/dim {bpd:.4f}")

    test_set = dataset.sample(args.n_test)
    test_nll = evaluate(model, test_set, args.eval_batch_size)
    samples = model.sample(1024)
    print(f"done in {time.time() - t0:.1f}s; test nll {test_nll:.2f}")
    print(f"sample mean-norm {samples.mean(0).norm():.3f}  sample std {samples.std():.3f}")


if __name__ == "__main__":
    main()

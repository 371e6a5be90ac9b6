"""Monte-Carlo pricing of path-dependent options under the Heston model.

Simulates correlated price / variance paths with a full-truncation Euler
scheme, keeps the price history for path-dependent payoffs and reports
prices with standard errors for an arithmetic Asian call, an up-and-out
barrier call and a lookback put.
"""
import argparse
import math
import time

import torch


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--paths", type=int, default=32_000)
    p.add_argument("--steps", type=int, default=360)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--fixed", action="store_true")
    return p.parse_args()


HESTON = dict(s0=100.0, v0=0.04, kappa=1.8, theta=0.045, xi=0.55, rho=-0.7, r=0.02)


def simulate_heston(n_paths, n_steps, maturity, gen, fixed=False):
    """Return a (n_paths, n_steps + 1) tensor of simulated spot prices."""
    p = HESTON
    dt = maturity / n_steps
    sqrt_dt = math.sqrt(dt)
    rho_bar = math.sqrt(1.0 - p["rho"] ** 2)

    log_s = torch.full((n_paths,), math.log(p["s0"]))
    v = torch.full((n_paths,), p["v0"])
    spot = torch.exp(log_s)

    if fixed:
        history = [spot]
    else:
        paths = spot.unsqueeze(1)

    for _ in range(n_steps):
        z1 = torch.randn(n_paths, generator=gen)
        z2 = torch.randn(n_paths, generator=gen)
        w_v = z1
        w_s = p["rho"] * z1 + rho_bar * z2

        v_pos = v.clamp(min=0.0)
        sqrt_v = v_pos.sqrt()
        log_s = log_s + (p["r"] - 0.5 * v_pos) * dt + sqrt_v * sqrt_dt * w_s
        v = v + p["kappa"] * (p["theta"] - v_pos) * dt + p["xi"] * sqrt_v * sqrt_dt * w_v
        spot = torch.exp(log_s)

        if fixed:
            history.append(spot)
        else:
            paths = torch.cat([paths, spot.unsqueeze(1)], dim=1)  # PLANTED

    if fixed:
        paths = torch.stack(history, dim=1)
    return paths


def discounted_stats(payoff, r, maturity):
    disc = math.exp(-r * maturity)
    vals = disc * payoff
    mean = vals.mean().item()
    stderr = vals.std().item() / math.sqrt(vals.numel())
    return mean, stderr


def price_exotics(paths, strike, barrier, r, maturity):
    monitoring = paths[:, 1:]
    final = paths[:, -1]

    asian_avg = monitoring.mean(dim=1)
    asian = (asian_avg - strike).clamp(min=0.0)

    knocked_out = (paths.amax(dim=1) >= barrier)
    barrier_call = torch.where(knocked_out, torch.zeros_like(final), (final - strike).clamp(min=0.0))

    lookback = paths.amax(dim=1) - final

    european = (final - strike).clamp(min=0.0)

    return {
        "european_call": discounted_stats(european, r, maturity),
        "asian_call": discounted_stats(asian, r, maturity),
        "up_and_out_call": discounted_stats(barrier_call, r, maturity),
        "lookback_put": discounted_stats(lookback, r, maturity),
    }


def main():
    args = parse_args()
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    maturity = 2.0

    t0 = time.perf_counter()
    paths = simulate_heston(args.paths, args.steps, maturity, gen, fixed=args.fixed)
    t_sim = time.perf_counter() - t0

    results = price_exotics(paths, strike=100.0, barrier=140.0, r=HESTON["r"], maturity=maturity)

    print(f"simulated {args.paths} paths x {args.steps} steps in {t_sim:.2f}s")
    print(f"terminal spot mean {paths[:, -1].mean().item():.4f}  "
          f"(forward {HESTON['s0'] * math.exp(HESTON['r'] * maturity):.4f})")
    for name, (price, se) in results.items():
        print(f"{name:>16s}: {price:8.4f} +- {se:.4f}")


if __name__ == "__main__":
    main()

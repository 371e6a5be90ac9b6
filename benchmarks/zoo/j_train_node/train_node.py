"""Fit a latent neural ODE to noisy damped-pendulum trajectories with RK4 + Adam,
then check how well it extrapolates beyond the training window."""
import argparse
import time

import torch

from odefit import LatentODE, damped_pendulum, odeint_rk4
from odefit.dynamics import initial_conditions


def make_dataset(n_traj, t_grid, seed, noise_std=0.01):
    gen = torch.Generator().manual_seed(seed)
    y0 = initial_conditions(n_traj, gen)
    with torch.no_grad():
        traj = odeint_rk4(damped_pendulum, y0, t_grid, fixed=True)
    noise = noise_std * torch.randn(traj.shape, generator=gen)
    return y0, traj + noise


def rollout_errors(model, y0, target, t_grid, fixed):
    with torch.no_grad():
        pred = model(y0, t_grid, odeint_rk4, fixed=fixed)
        return ((pred - target) ** 2).mean(dim=(1, 2))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--n-traj", type=int, default=128)
    parser.add_argument("--train-steps", type=int, default=400)
    parser.add_argument("--total-steps", type=int, default=1800)
    args = parser.parse_args()

    torch.manual_seed(0)
    dt = 0.01
    t_grid = torch.arange(args.total_steps + 1, dtype=torch.float32) * dt
    y0_train, y_train = make_dataset(args.n_traj, t_grid[: args.train_steps + 1], seed=1)
    y0_test, y_test = make_dataset(224, t_grid, seed=2, noise_std=0.0)

    model = LatentODE(obs_dim=2, latent_dim=32, hidden=32)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)

    start = time.perf_counter()
    for epoch in range(args.epochs):
        # curriculum: integrate over a growing horizon
        horizon = min(args.train_steps, args.train_steps // 2 + epoch * args.train_steps // 6)
        t_sub = t_grid[: horizon + 1]
        optimizer.zero_grad()
        pred = model(y0_train, t_sub, odeint_rk4, fixed=args.fixed)
        loss = torch.mean((pred - y_train[: horizon + 1]) ** 2)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        print(f"epoch {epoch:3d} horizon {horizon:4d} loss {loss.item():.5f}")
    train_time = time.perf_counter() - start

    start = time.perf_counter()
    err = rollout_errors(model, y0_test, y_test, t_grid, args.fixed)
    n_in = args.train_steps + 1
    print(f"interpolation MSE (t <= {t_grid[args.train_steps]:.1f}): {err[:n_in].mean():.5f}")
    print(f"extrapolation MSE (t >  {t_grid[args.train_steps]:.1f}): {err[n_in:].mean():.5f}")
    print(f"training {train_time:.2f}s, rollout {time.perf_counter() - start:.2f}s")


if __name__ == "__main__":
    main()

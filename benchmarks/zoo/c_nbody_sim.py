"""Gravitational N-body simulation (velocity Verlet) written directly with torch
tensors, recording the full trajectory for later analysis (energy drift,
radius of gyration, mean-square displacement).

Usage: python nbody_sim.py [--fixed] [--steps N] [--n N]
"""
import argparse
import time

import torch

G, SOFT = 1.0, 0.05


def accelerations(pos, mass):
    diff = pos[None, :, :] - pos[:, None, :]            # (n, n, 3): r_j - r_i
    dist2 = (diff * diff).sum(-1) + SOFT ** 2
    inv_d3 = dist2.pow(-1.5)
    inv_d3.fill_diagonal_(0.0)
    return G * (diff * (inv_d3 * mass[None, :])[..., None]).sum(1)


def energy(pos, vel, mass):
    kin = 0.5 * (mass * (vel * vel).sum(1)).sum()
    d = torch.cdist(pos, pos) + torch.eye(len(mass))
    pot = -0.5 * G * ((mass[:, None] * mass[None, :]) / (d ** 2 + SOFT ** 2).sqrt()).fill_diagonal_(0).sum()
    return float(kin + pot)


def plummer(n, gen):
    r = 1.0 / torch.sqrt(torch.rand(n, generator=gen).clamp_min(1e-3) ** (-2 / 3) - 1)
    direction = torch.nn.functional.normalize(torch.randn(n, 3, generator=gen), dim=1)
    pos = r[:, None].clamp_max(5.0) * direction
    vel = 0.3 * torch.randn(n, 3, generator=gen)
    return pos - pos.mean(0), vel - vel.mean(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--steps", type=int, default=9000)
    ap.add_argument("--dt", type=float, default=1e-3)
    args = ap.parse_args()

    gen = torch.Generator().manual_seed(0)
    mass = torch.full((args.n,), 1.0 / args.n)
    pos, vel = plummer(args.n, gen)
    e0 = energy(pos, vel, mass)

    t0 = time.time()
    acc = accelerations(pos, mass)
    if args.fixed:
        traj = torch.empty(args.steps + 1, args.n, 3)
        traj[0] = pos
    else:
        traj = pos[None].clone()
    for step in range(1, args.steps + 1):
        vel += 0.5 * args.dt * acc
        pos += args.dt * vel
        acc = accelerations(pos, mass)
        vel += 0.5 * args.dt * acc
        if args.fixed:
            traj[step] = pos
        else:
            traj = torch.cat([traj, pos[None]], dim=0)  # PLANTED
    sim_t = time.time() - t0

    e1 = energy(pos, vel, mass)
    com = traj.mean(1, keepdim=True)
    rg = ((traj - com) ** 2).sum(-1).mean(1).sqrt()
    msd = ((traj - traj[0]) ** 2).sum(-1).mean(1)
    print(f"steps={args.steps} energy drift={(e1 - e0) / abs(e0):.2e} "
          f"Rg start/end={rg[0]:.3f}/{rg[-1]:.3f} MSD end={msd[-1]:.4f} sim={sim_t:.2f}s")


if __name__ == "__main__":
    main()

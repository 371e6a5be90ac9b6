"""Learn a pairwise interaction potential from an observed particle trajectory.

A reference trajectory of soft-repulsive particles in a rotating harmonic
trap (with friction) is generated with a damped velocity-Verlet integrator.
A neural pair-force model is then fitted by rolling the same integrator
forward window by window and matching the observed positions.
"""
import argparse
import math
import time

import torch
import torch.nn as nn


class DampedVerlet:
    """Velocity Verlet with a velocity-rescaling friction step (deterministic Langevin)."""

    def __init__(self, force_fn, dt, friction=0.0, mass=1.0):
        self.force_fn = force_fn
        self.dt = dt
        self.mass = mass
        self.damp = float(torch.exp(torch.tensor(-friction * dt)))

    def step(self, pos, vel, force, t):
        vel_half = vel + 0.5 * self.dt * force / self.mass
        pos = pos + self.dt * vel_half
        force = self.force_fn(pos, t + self.dt)
        vel = (vel_half + 0.5 * self.dt * force / self.mass) * self.damp
        return pos, vel, force

    def rollout(self, pos, vel, t0, n_steps):
        force = self.force_fn(pos, t0)
        traj = []
        for i in range(n_steps):
            pos, vel, force = self.step(pos, vel, force, t0 + i * self.dt)
            traj.append(pos)
        return torch.stack(traj), pos, vel


def trap_center(t, radius=1.0, omega=0.8):
    return torch.tensor([radius * math.cos(omega * t), radius * math.sin(omega * t)])


def pair_geometry(pos):
    diff = pos.unsqueeze(1) - pos.unsqueeze(0)
    n = pos.size(0)
    off = ~torch.eye(n, dtype=torch.bool)
    diff = diff[off].view(n, n - 1, -1)
    dist = diff.norm(dim=-1, keepdim=True).clamp_min(1e-4)
    return diff / dist, dist


class SoftSphereTrap:
    """Ground-truth physics: Gaussian pair repulsion plus an isotropic trap."""

    def __init__(self, strength=4.0, width=0.6, trap_k=0.8):
        self.strength, self.width, self.trap_k = strength, width, trap_k

    def __call__(self, pos, t):
        unit, dist = pair_geometry(pos)
        mag = self.strength * dist / self.width**2 * torch.exp(-0.5 * (dist / self.width) ** 2)
        return (mag * unit).sum(1) - self.trap_k * (pos - trap_center(t))


class PairForceNet(nn.Module):
    def __init__(self, hidden=64, n_rbf=16, cutoff=3.0):
        super().__init__()
        self.register_buffer("centers", torch.linspace(0.0, cutoff, n_rbf))
        self.gamma = (n_rbf / cutoff) ** 2
        self.mlp = nn.Sequential(
            nn.Linear(n_rbf, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, 1),
        )
        nn.init.zeros_(self.mlp[-1].weight)
        nn.init.zeros_(self.mlp[-1].bias)
        self.log_trap = nn.Parameter(torch.tensor(0.0))

    def forward(self, pos, t):
        unit, dist = pair_geometry(pos)
        rbf = torch.exp(-self.gamma * (dist - self.centers) ** 2)
        mag = self.mlp(rbf)
        return (mag * unit).sum(1) - self.log_trap.exp() * (pos - trap_center(t))


class TrajectoryFitter:
    def __init__(self, model, dt, friction, window, lr):
        self.model = model
        self.integrator = DampedVerlet(model, dt, friction)
        self.window = window
        self.opt = torch.optim.Adam(model.parameters(), lr=lr)

    def fit_epoch(self, ref_pos, pos0, vel0, fixed):
        self.opt.zero_grad(set_to_none=True)
        pos, vel = pos0, vel0
        n_windows = ref_pos.size(0) // self.window
        total = 0.0
        for w in range(n_windows):
            target = ref_pos[w * self.window : (w + 1) * self.window]
            t0 = w * self.window * self.integrator.dt
            pred, pos_end, vel_end = self.integrator.rollout(pos, vel, t0, self.window)
            loss = (pred - target).pow(2).mean() / n_windows
            loss.backward(retain_graph=True)
            total += loss.item()
            pos, vel = pos_end, vel_end  # PLANTED
            if fixed:
                pos, vel = pos.detach(), vel.detach()
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        return total

    @torch.no_grad()
    def force_error(self, truth, samples, times):
        err = [(self.model(p, t) - truth(p, t)).norm(dim=-1).mean() for p, t in zip(samples, times)]
        return torch.stack(err).mean().item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--particles", type=int, default=24)
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()

    torch.manual_seed(0)
    dt, friction = 0.02, 1.5
    truth = SoftSphereTrap()
    pos0 = torch.randn(args.particles, 2) * 1.5
    vel0 = torch.randn(args.particles, 2) * 0.3
    with torch.no_grad():
        ref_pos, _, _ = DampedVerlet(truth, dt, friction).rollout(pos0, vel0, 0.0, args.steps)
    ref_pos = ref_pos + 0.005 * torch.randn_like(ref_pos)

    model = PairForceNet()
    fitter = TrajectoryFitter(model, dt, friction, args.window, lr=args.lr)
    probe_idx = list(range(0, args.steps, args.steps // 8))
    probe, probe_t = ref_pos[probe_idx], [(i + 1) * dt for i in probe_idx]
    print(f"initial force error {fitter.force_error(truth, probe, probe_t):.4f}")

    t0 = time.perf_counter()
    for ep in range(args.epochs):
        loss = fitter.fit_epoch(ref_pos, pos0, vel0, args.fixed)
        if ep % 2 == 0 or ep == args.epochs - 1:
            print(f"epoch {ep:3d} traj loss {loss:.5f} force err {fitter.force_error(truth, probe, probe_t):.4f}")
    print(f"trap stiffness learned {model.log_trap.exp().item():.3f} (true {truth.trap_k})")
    print(f"fit time {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()

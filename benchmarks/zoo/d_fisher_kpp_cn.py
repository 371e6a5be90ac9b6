"""Ensemble simulation of the 1-D Fisher-KPP reaction-diffusion equation.

    u_t = D u_xx + r u (1 - u)

Diffusion is treated implicitly with Crank-Nicolson, the logistic reaction
term explicitly (IMEX).  Many members with different growth rates r and
random initial seeds are integrated together as the columns of one matrix,
and the travelling-front speed of each member is compared to the
theoretical value 2 sqrt(D r).
"""
import argparse
import math
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--fixed", action="store_true")
parser.add_argument("--nx", type=int, default=600)
parser.add_argument("--members", type=int, default=48)
parser.add_argument("--t-end", type=float, default=40.0)
parser.add_argument("--dt", type=float, default=0.04)
args = parser.parse_args()

torch.manual_seed(0)
DTYPE = torch.float64


def laplacian_1d(n, dx):
    """Second-difference operator with zero-flux (Neumann) boundaries."""
    L = torch.diag(torch.full((n,), -2.0, dtype=DTYPE))
    L += torch.diag(torch.ones(n - 1, dtype=DTYPE), 1)
    L += torch.diag(torch.ones(n - 1, dtype=DTYPE), -1)
    L[0, 1] = 2.0
    L[-1, -2] = 2.0
    return L / dx ** 2


class CrankNicolsonIMEX:
    def __init__(self, nx, length, diffusion, dt):
        self.x = torch.linspace(0.0, length, nx, dtype=DTYPE)
        self.dx = (self.x[1] - self.x[0]).item()
        self.dt = dt
        L = laplacian_1d(nx, self.dx)
        eye = torch.eye(nx, dtype=DTYPE)
        self.A = eye - 0.5 * dt * diffusion * L     # implicit half
        self.B = eye + 0.5 * dt * diffusion * L     # explicit half
        self.lu, self.pivots = torch.linalg.lu_factor(self.A)

    def reaction(self, u, r):
        return r * u * (1.0 - u)

    def step(self, u, r):
        rhs = self.B @ u + self.dt * self.reaction(u, r)
        if args.fixed:
            return torch.linalg.lu_solve(self.lu, self.pivots, rhs)
        return torch.linalg.solve(self.A, rhs)  # PLANTED


def initial_condition(x, members):
    """A small random bump of invaders near the left wall for each member."""
    width = 2.0 + 3.0 * torch.rand(members, dtype=DTYPE)
    amp = 0.5 + 0.5 * torch.rand(members, dtype=DTYPE)
    u0 = amp[None, :] * torch.exp(-(x[:, None] / width[None, :]) ** 2)
    return u0.clamp(0.0, 1.0)


def front_position(x, u, level=0.5):
    """Rightmost x where u crosses `level`, by linear interpolation."""
    above = u >= level
    idx = (above.to(torch.int64) * torch.arange(u.shape[0])[:, None]).amax(0)
    idx = idx.clamp(max=u.shape[0] - 2)
    u0 = u.gather(0, idx[None]).squeeze(0)
    u1 = u.gather(0, (idx + 1)[None]).squeeze(0)
    frac = ((u0 - level) / (u0 - u1).clamp(min=1e-12)).clamp(0.0, 1.0)
    return x[idx] + frac * (x[1] - x[0])


def main():
    D = 1.0
    solver = CrankNicolsonIMEX(args.nx, length=150.0, diffusion=D, dt=args.dt)
    r = torch.linspace(0.2, 1.0, args.members, dtype=DTYPE)[None, :]
    u = initial_condition(solver.x, args.members)

    n_steps = int(round(args.t_end / args.dt))
    record_every = max(1, n_steps // 40)
    times, fronts = [], []
    mass0 = u.sum(0) * solver.dx

    t0 = time.time()
    for n in range(1, n_steps + 1):
        u = solver.step(u, r)
        if n % record_every == 0:
            times.append(n * args.dt)
            fronts.append(front_position(solver.x, u))
    elapsed = time.time() - t0

    times = torch.tensor(times, dtype=DTYPE)
    fronts = torch.stack(fronts)                     # (records, members)
    late = times > 0.5 * args.t_end                 # fit on the developed front only
    tt = times[late] - times[late].mean()
    ff = fronts[late] - fronts[late].mean(0)
    speed = (tt[:, None] * ff).sum(0) / (tt ** 2).sum()
    theory = 2.0 * torch.sqrt(D * r.squeeze(0))
    rel_err = ((speed - theory) / theory).abs()

    mass = u.sum(0) * solver.dx
    print(f"grid {args.nx}  members {args.members}  steps {n_steps}  ({elapsed:.2f}s)")
    for k in range(0, args.members, max(1, args.members // 6)):
        print(f"  r={r[0, k]:.3f}  speed={speed[k]:.3f}  theory={theory[k]:.3f}  "
              f"mass {mass0[k]:.2f}->{mass[k]:.2f}")
    print(f"mean |rel err| of front speed: {rel_err.mean():.4f}")
    print(f"u range: [{u.min():.3e}, {u.max():.3f}]")


if __name__ == "__main__":
    main()

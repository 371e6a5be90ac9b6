"""Physics-informed neural network for the 1-D heat equation.

    u_t = nu * u_xx,            x in [-1, 1], t in [0, 1]
    u(x, 0) = sin(pi x)
    u(-1, t) = u(1, t) = 0

The exact solution u = exp(-nu pi^2 t) sin(pi x) is used to report the
relative L2 error of the trained network.

The network uses neuron-wise locally adaptive tanh activations (Jagtap et al.,
"Locally adaptive activation functions with slope recovery", 2020): every
hidden unit k has its own trainable slope a_k and computes tanh(n * a_k * z_k),
and a slope-recovery term is added to the loss.

Training: Adam with periodically resampled collocation points, followed by a
short L-BFGS polish on the last collocation set. Both optimizers are driven
through closures.
"""
import argparse
import math
import time

import torch
import torch.nn as nn


# ----------------------------------------------------------------------------
# Problem definition
# ----------------------------------------------------------------------------
X_MIN, X_MAX = -1.0, 1.0
T_MIN, T_MAX = 0.0, 1.0


def initial_condition(x):
    return torch.sin(math.pi * x)


def exact_solution(x, t, nu):
    return torch.exp(-nu * math.pi ** 2 * t) * torch.sin(math.pi * x)


class Sampler:
    """Draws collocation, initial and boundary points from a seeded generator."""

    def __init__(self, n_colloc, n_ic, n_bc, seed):
        self.n_colloc, self.n_ic, self.n_bc = n_colloc, n_ic, n_bc
        self.gen = torch.Generator().manual_seed(seed)

    def _uniform(self, n, lo, hi):
        return lo + (hi - lo) * torch.rand(n, 1, generator=self.gen)

    def collocation(self):
        x = self._uniform(self.n_colloc, X_MIN, X_MAX)
        t = self._uniform(self.n_colloc, T_MIN, T_MAX)
        return torch.cat([x, t], dim=1)

    def initial(self):
        x = self._uniform(self.n_ic, X_MIN, X_MAX)
        return torch.cat([x, torch.zeros_like(x)], dim=1), initial_condition(x)

    def boundary(self):
        t = self._uniform(self.n_bc, T_MIN, T_MAX)
        side = torch.where(torch.rand(self.n_bc, 1, generator=self.gen) < 0.5,
                           torch.full_like(t, X_MIN), torch.full_like(t, X_MAX))
        return torch.cat([side, t], dim=1), torch.zeros_like(t)


# ----------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------
class AdaptiveTanh(nn.Module):
    """tanh(n * a_k * z_k) with one trainable slope a_k per neuron (N-LAAF)."""

    def __init__(self, width, scale=10.0, as_vector=False):
        super().__init__()
        self.scale = scale
        self.as_vector = as_vector
        init = 1.0 / scale  # n * a = 1 at initialisation, i.e. plain tanh
        if as_vector:
            self.slopes = nn.Parameter(torch.full((width,), init))
        else:
            self.slopes = nn.ParameterList(
                nn.Parameter(torch.tensor(init)) for _ in range(width))  # PLANTED

    def slope_vector(self):
        if self.as_vector:
            return self.slopes
        return torch.stack(tuple(self.slopes))

    def forward(self, z):
        return torch.tanh(self.scale * self.slope_vector() * z)


class PINN(nn.Module):
    def __init__(self, width=128, depth=4, vector_slopes=False):
        super().__init__()
        layers, fan_in = [], 2
        for _ in range(depth):
            lin = nn.Linear(fan_in, width)
            nn.init.xavier_normal_(lin.weight)
            nn.init.zeros_(lin.bias)
            layers += [lin, AdaptiveTanh(width, as_vector=vector_slopes)]
            fan_in = width
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, 1)
        nn.init.xavier_normal_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        lo = torch.tensor([X_MIN, T_MIN])
        hi = torch.tensor([X_MAX, T_MAX])
        self.register_buffer("shift", (hi + lo) / 2)
        self.register_buffer("half_range", (hi - lo) / 2)

    def forward(self, xt):
        z = (xt - self.shift) / self.half_range  # map the domain to [-1, 1]^2
        return self.head(self.body(z))

    def slope_recovery(self):
        # S(a) = 1 / mean_layers(exp(mean_k a_k)); small when the slopes grow
        acts = [m for m in self.body if isinstance(m, AdaptiveTanh)]
        layer_means = torch.stack([m.slope_vector().mean() for m in acts])
        return 1.0 / torch.exp(layer_means).mean()


# ----------------------------------------------------------------------------
# Losses
# ----------------------------------------------------------------------------
def heat_residual(model, xt, nu):
    xt = xt.detach().requires_grad_(True)
    u = model(xt)
    du = torch.autograd.grad(u, xt, grad_outputs=torch.ones_like(u),
                             create_graph=True)[0]
    u_x, u_t = du[:, 0:1], du[:, 1:2]
    u_xx = torch.autograd.grad(u_x, xt, grad_outputs=torch.ones_like(u_x),
                               create_graph=True)[0][:, 0:1]
    return u_t - nu * u_xx


class PINNLoss:
    def __init__(self, model, nu, w_ic=10.0, w_bc=10.0, w_slope=1e-3):
        self.model, self.nu = model, nu
        self.w_ic, self.w_bc, self.w_slope = w_ic, w_bc, w_slope
        self.parts = {}

    def set_points(self, colloc, ic, bc):
        self.colloc = colloc
        self.ic_xt, self.ic_u = ic
        self.bc_xt, self.bc_u = bc

    def __call__(self):
        r = heat_residual(self.model, self.colloc, self.nu)
        l_pde = r.pow(2).mean()
        l_ic = (self.model(self.ic_xt) - self.ic_u).pow(2).mean()
        l_bc = (self.model(self.bc_xt) - self.bc_u).pow(2).mean()
        l_slope = self.model.slope_recovery()
        self.parts = {"pde": l_pde.item(), "ic": l_ic.item(), "bc": l_bc.item()}
        return l_pde + self.w_ic * l_ic + self.w_bc * l_bc + self.w_slope * l_slope


@torch.no_grad()
def relative_l2_error(model, nu, nx=201, nt=101):
    x = torch.linspace(X_MIN, X_MAX, nx)
    t = torch.linspace(T_MIN, T_MAX, nt)
    xx, tt = torch.meshgrid(x, t, indexing="ij")
    xt = torch.stack([xx.reshape(-1), tt.reshape(-1)], dim=1)
    u_ref = exact_solution(xt[:, :1], xt[:, 1:], nu)
    u_hat = model(xt)
    return (torch.linalg.norm(u_hat - u_ref) / torch.linalg.norm(u_ref)).item()


# ----------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------
def train(args):
    torch.manual_seed(args.seed)
    model = PINN(args.width, args.depth, vector_slopes=args.fixed)
    sampler = Sampler(args.n_colloc, args.n_ic, args.n_bc, seed=args.seed + 1)
    criterion = PINNLoss(model, args.nu)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"PINN: depth={args.depth} width={args.width} params={n_params} "
          f"nu={args.nu:.3f}")

    adam = torch.optim.Adam(model.parameters(), lr=args.lr)
    sched = torch.optim.lr_scheduler.ExponentialLR(adam, gamma=args.lr_decay)

    def adam_closure():
        adam.zero_grad(set_to_none=True)
        loss = criterion()
        loss.backward()
        return loss

    t0 = time.perf_counter()
    for it in range(1, args.adam_iters + 1):
        if (it - 1) % args.resample_every == 0:
            criterion.set_points(sampler.collocation(), sampler.initial(),
                                 sampler.boundary())
        loss = adam.step(adam_closure)
        if it % args.decay_every == 0:
            sched.step()
        if it % args.log_every == 0 or it == 1:
            p = criterion.parts
            print(f"[adam  {it:5d}] loss={loss.item():.3e} pde={p['pde']:.2e} "
                  f"ic={p['ic']:.2e} bc={p['bc']:.2e} "
                  f"lr={sched.get_last_lr()[0]:.1e} ({time.perf_counter() - t0:.1f}s)")
    print(f"after Adam: rel. L2 error = {relative_l2_error(model, args.nu):.3e}")

    lbfgs = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=args.lbfgs_iters,
                              history_size=50, tolerance_grad=1e-9,
                              tolerance_change=1e-12, line_search_fn="strong_wolfe")
    n_evals = 0

    def lbfgs_closure():
        nonlocal n_evals
        n_evals += 1
        lbfgs.zero_grad(set_to_none=True)
        loss = criterion()
        loss.backward()
        return loss

    lbfgs.step(lbfgs_closure)
    final = criterion().item()
    p = criterion.parts
    print(f"[lbfgs] evals={n_evals} loss={final:.3e} pde={p['pde']:.2e} "
          f"ic={p['ic']:.2e} bc={p['bc']:.2e} ({time.perf_counter() - t0:.1f}s)")
    err = relative_l2_error(model, args.nu)
    print(f"final: rel. L2 error vs exact solution = {err:.3e}")
    return err


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nu", type=float, default=0.1)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--n-colloc", type=int, default=256)
    ap.add_argument("--n-ic", type=int, default=64)
    ap.add_argument("--n-bc", type=int, default=64)
    ap.add_argument("--adam-iters", type=int, default=300)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--lr-decay", type=float, default=0.9)
    ap.add_argument("--decay-every", type=int, default=50)
    ap.add_argument("--resample-every", type=int, default=25)
    ap.add_argument("--lbfgs-iters", type=int, default=40)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fixed", action="store_true")
    return ap.parse_args()


if __name__ == "__main__":
    train(parse_args())

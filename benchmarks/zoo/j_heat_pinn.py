"""Physics-informed neural network for the 1D heat equation
    u_t = alpha * u_xx,  x in [0, 1], t in [0, 0.5]
with u(x, 0) = sin(pi x) and u(0, t) = u(1, t) = 0.
Exact solution: u = exp(-alpha pi^2 t) sin(pi x)."""
import argparse
import math
import time

import torch
from torch import nn


class HeatPINN:
    def __init__(self, alpha=0.4, hidden=32, n_colloc=64, n_boundary=32, seed=0):
        torch.manual_seed(seed)
        self.alpha = alpha
        self.net = nn.Sequential(
            nn.Linear(2, hidden), nn.Tanh(),
            nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, 1),
        )
        self.n_colloc = n_colloc
        self.n_boundary = n_boundary
        self.t_max = 0.5

    def exact(self, x, t):
        return torch.exp(-self.alpha * math.pi ** 2 * t) * torch.sin(math.pi * x)

    def sample_collocation(self):
        x = torch.rand(self.n_colloc, 1)
        t = torch.rand(self.n_colloc, 1) * self.t_max
        return torch.cat([x, t], dim=1).requires_grad_(True)

    def sample_boundary(self):
        x0 = torch.rand(self.n_boundary, 1)
        initial = torch.cat([x0, torch.zeros_like(x0)], dim=1)
        tb = torch.rand(self.n_boundary, 1) * self.t_max
        side = (torch.rand(self.n_boundary, 1) > 0.5).float()
        walls = torch.cat([side, tb], dim=1)
        xt = torch.cat([initial, walls], dim=0)
        target = self.exact(xt[:, :1], xt[:, 1:])
        return xt, target

    def pde_residual(self, xt, fixed=False):
        u = self.net(xt)
        if fixed:
            grads = torch.autograd.grad(u.sum(), xt, create_graph=True)[0]
            u_x, u_t = grads[:, :1], grads[:, 1:]
            u_xx = torch.autograd.grad(u_x.sum(), xt, create_graph=True)[0][:, :1]
        else:
            u_x_rows, u_t_rows, u_xx_rows = [], [], []
            for i in range(xt.shape[0]):  # PLANTED
                g = torch.autograd.grad(u[i, 0], xt, create_graph=True)[0][i]
                gg = torch.autograd.grad(g[0], xt, create_graph=True)[0][i]
                u_x_rows.append(g[0])
                u_t_rows.append(g[1])
                u_xx_rows.append(gg[0])
            u_t = torch.stack(u_t_rows).unsqueeze(1)
            u_xx = torch.stack(u_xx_rows).unsqueeze(1)
        return u_t - self.alpha * u_xx

    def loss(self, fixed=False):
        xt_c = self.sample_collocation()
        residual = self.pde_residual(xt_c, fixed=fixed)
        xt_b, u_b = self.sample_boundary()
        boundary_err = self.net(xt_b) - u_b
        return residual.pow(2).mean() + 10.0 * boundary_err.pow(2).mean()

    @torch.no_grad()
    def relative_l2_error(self, n=101):
        xs = torch.linspace(0, 1, n)
        ts = torch.linspace(0, self.t_max, n)
        X, T = torch.meshgrid(xs, ts, indexing="ij")
        xt = torch.stack([X.reshape(-1), T.reshape(-1)], dim=1)
        pred = self.net(xt).squeeze(1)
        ref = self.exact(xt[:, 0], xt[:, 1])
        return (torch.linalg.norm(pred - ref) / torch.linalg.norm(ref)).item()


def train(pinn, iterations, lr, fixed):
    optimizer = torch.optim.Adam(pinn.net.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=iterations // 3, gamma=0.5)
    history = []
    for it in range(iterations):
        optimizer.zero_grad()
        loss = pinn.loss(fixed=fixed)
        loss.backward()
        optimizer.step()
        scheduler.step()
        history.append(loss.item())
        if it % 20 == 0 or it == iterations - 1:
            print(f"iter {it:4d}  loss {loss.item():.3e}")
    return history


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--iterations", type=int, default=120)
    args = parser.parse_args()

    pinn = HeatPINN()
    start = time.perf_counter()
    history = train(pinn, args.iterations, lr=5e-3, fixed=args.fixed)
    elapsed = time.perf_counter() - start
    print(f"final loss {history[-1]:.3e}, relative L2 error {pinn.relative_l2_error():.3e}")
    print(f"training took {elapsed:.2f}s")


if __name__ == "__main__":
    main()

"""Exact (Hyvarinen) score matching on a toy 2-D density, then Langevin sampling.

    J(theta) = E_x [ 0.5 * ||s_theta(x)||^2 + tr(d s_theta(x) / dx) ]

The trace term needs the input-Jacobian of the score network, which we get
from torch.autograd.functional.jacobian.
"""
import argparse
import math
import time

import torch
import torch.nn as nn


def pinwheel(n, gen, n_arms=5, radial_std=0.3, tangential_std=0.1, rate=0.25):
    rads = torch.linspace(0, 2 * math.pi, n_arms + 1)[:-1]
    feats = torch.randn(n, 2, generator=gen) * torch.tensor([radial_std, tangential_std])
    feats[:, 0] += 1.0
    labels = torch.randint(0, n_arms, (n,), generator=gen)
    angles = rads[labels] + rate * torch.exp(feats[:, 0])
    c, s = torch.cos(angles), torch.sin(angles)
    rot = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)
    return 2.0 * (rot @ feats[..., None]).squeeze(-1)


class ScoreNet(nn.Module):
    def __init__(self, dim=2, hidden=128, depth=3):
        super().__init__()
        layers, d = [], dim
        for _ in range(depth):
            layers += [nn.Linear(d, hidden), nn.Softplus()]
            d = hidden
        layers.append(nn.Linear(d, dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class ScoreMatchingTrainer:
    def __init__(self, model, lr=1e-3, batch_size=128, fixed=False, seed=0):
        self.model = model
        self.opt = torch.optim.Adam(model.parameters(), lr=lr)
        self.batch_size = batch_size
        self.fixed = fixed
        self.gen = torch.Generator().manual_seed(seed)
        self.history = []

    def score_jacobian(self, x):
        """Per-sample Jacobians d s(x_b) / d x_b, shape (B, D, D)."""
        if self.fixed:
            jac = torch.autograd.functional.jacobian(
                lambda inp: self.model(inp).sum(0), x, create_graph=True)
            return jac.permute(1, 0, 2)
        jac = torch.autograd.functional.jacobian(self.model, x, create_graph=True)  # PLANTED
        return torch.einsum("bibj->bij", jac)

    def loss(self, x):
        s = self.model(x)
        jac = self.score_jacobian(x)
        trace = jac.diagonal(dim1=-2, dim2=-1).sum(-1)
        return (0.5 * (s ** 2).sum(-1) + trace).mean()

    def train_step(self):
        x = pinwheel(self.batch_size, self.gen)
        loss = self.loss(x)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.item()

    def fit(self, n_steps, log_every=50):
        t0 = time.time()
        for step in range(1, n_steps + 1):
            self.history.append(self.train_step())
            if step % log_every == 0:
                recent = sum(self.history[-log_every:]) / log_every
                print(f"step {step:5d}  sm-loss {recent:8.4f}  ({time.time() - t0:.1f}s)")

    @torch.no_grad()
    def langevin_sample(self, n, n_steps=300, step_size=2e-3):
        x = 3.0 * torch.randn(n, 2, generator=self.gen)
        for _ in range(n_steps):
            noise = torch.randn(x.shape, generator=self.gen)
            x = x + step_size * self.model(x) + math.sqrt(2 * step_size) * noise
        return x


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=48)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()

    torch.manual_seed(0)
    model = ScoreNet(hidden=args.hidden)
    trainer = ScoreMatchingTrainer(model, batch_size=args.batch_size, fixed=args.fixed)
    trainer.fit(args.steps)

    samples = trainer.langevin_sample(1000)
    data = pinwheel(1000, trainer.gen)
    r_s, r_d = samples.norm(dim=-1), data.norm(dim=-1)
    print(f"radius mean/std  samples {r_s.mean():.3f}/{r_s.std():.3f}  "
          f"data {r_d.mean():.3f}/{r_d.std():.3f}")


if __name__ == "__main__":
    main()

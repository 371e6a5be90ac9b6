import math

import torch
from torch import nn


def damped_pendulum(t, state, damping=0.25, omega0=2.0):
    theta, omega = state[..., 0], state[..., 1]
    dtheta = omega
    domega = -damping * omega - omega0 ** 2 * torch.sin(theta)
    return torch.stack([dtheta, domega], dim=-1)


class VectorField(nn.Module):
    """Autonomous learned vector field f(z) with a tanh MLP."""

    def __init__(self, state_dim=2, hidden=48, depth=2):
        super().__init__()
        layers = [nn.Linear(state_dim, hidden), nn.Tanh()]
        for _ in range(depth - 1):
            layers += [nn.Linear(hidden, hidden), nn.Tanh()]
        layers.append(nn.Linear(hidden, state_dim))
        self.net = nn.Sequential(*layers)
        with torch.no_grad():
            self.net[-1].weight.mul_(0.1)
            self.net[-1].bias.zero_()

    def forward(self, t, z):
        return self.net(z)


class LatentODE(nn.Module):
    """Encode the observed initial state, evolve a latent ODE, decode each step."""

    def __init__(self, obs_dim=2, latent_dim=16, hidden=32):
        super().__init__()
        self.encoder = nn.Linear(obs_dim, latent_dim)
        self.field = VectorField(latent_dim, hidden, depth=1)
        self.decoder = nn.Linear(latent_dim, obs_dim)

    def forward(self, y0, t_grid, integrator, **kwargs):
        z0 = self.encoder(y0)
        z_traj = integrator(self.field, z0, t_grid, **kwargs)
        return self.decoder(z_traj)


def initial_conditions(n, generator):
    theta0 = (torch.rand(n, generator=generator) - 0.5) * math.pi
    omega0 = (torch.rand(n, generator=generator) - 0.5) * 2.0
    return torch.stack([theta0, omega0], dim=-1)

"""Building blocks for a Glow-style normalising flow on flat vectors."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class ActNorm(nn.Module):
    """Per-feature affine layer with data-dependent initialisation."""

    def __init__(self, dim):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(dim))
        self.log_scale = nn.Parameter(torch.zeros(dim))
        self.register_buffer("initialised", torch.tensor(False))

    @torch.no_grad()
    def _init(self, x):
        self.loc.copy_(-x.mean(0))
        self.log_scale.copy_(-torch.log(x.std(0) + 1e-6))
        self.initialised.fill_(True)

    def forward(self, x):
        if not bool(self.initialised):
            self._init(x)
        y = (x + self.loc) * torch.exp(self.log_scale)
        return y, self.log_scale.sum().expand(x.shape[0])

    def inverse(self, y):
        return y * torch.exp(-self.log_scale) - self.loc


class LULinear(nn.Module):
    """Invertible linear map W = P L (U + diag(s)), as in Glow's LU variant."""

    def __init__(self, dim, fixed=False):
        super().__init__()
        self.fixed = fixed
        w0 = torch.linalg.qr(torch.randn(dim, dim))[0]
        P, L, U = torch.linalg.lu(w0)
        s = torch.diagonal(U)
        self.register_buffer("P", P)
        self.register_buffer("perm", P.argmax(1))
        self.register_buffer("inv_perm", torch.argsort(P.argmax(1)))
        self.register_buffer("sign_s", torch.sign(s))
        self.register_buffer("l_mask", torch.tril(torch.ones(dim, dim), -1))
        self.register_buffer("eye", torch.eye(dim))
        self.L = nn.Parameter(L)
        self.U = nn.Parameter(torch.triu(U, 1))
        self.log_s = nn.Parameter(torch.log(torch.abs(s)))

    def _lower(self):
        return self.L * self.l_mask + self.eye

    def _upper(self):
        return self.U * self.l_mask.T + torch.diag(self.sign_s * torch.exp(self.log_s))

    def weight(self):
        return self.P @ self._lower() @ self._upper()

    def forward(self, x):
        # y = W x with W = P L U, applied factor by factor
        h = F.linear(F.linear(x, self._upper()), self._lower())
        y = h[:, self.perm]
        if self.fixed:
            logdet = self.log_s.sum()
        else:
            logdet = torch.linalg.slogdet(self.weight())[1]  # PLANTED
        return y, logdet.expand(x.shape[0])

    def inverse(self, y):
        h = y[:, self.inv_perm]
        h = torch.linalg.solve_triangular(self._lower(), h.T, upper=False, unitriangular=True)
        return torch.linalg.solve_triangular(self._upper(), h, upper=True).T


class AffineCoupling(nn.Module):
    """RealNVP affine coupling; the first half conditions the second half."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.d1 = dim // 2
        self.net = nn.Sequential(
            nn.Linear(self.d1, hidden), nn.GELU(),
            nn.Linear(hidden, hidden), nn.GELU(),
            nn.Linear(hidden, 2 * (dim - self.d1)),
        )
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)

    def _params(self, xa):
        h = self.net(xa)
        shift, raw = h.chunk(2, dim=-1)
        log_scale = 2.0 * torch.tanh(raw / 2.0)
        return shift, log_scale

    def forward(self, x):
        xa, xb = x[:, :self.d1], x[:, self.d1:]
        shift, log_scale = self._params(xa)
        yb = xb * torch.exp(log_scale) + shift
        return torch.cat([xa, yb], dim=-1), log_scale.sum(-1)

    def inverse(self, y):
        ya, yb = y[:, :self.d1], y[:, self.d1:]
        shift, log_scale = self._params(ya)
        return torch.cat([ya, (yb - shift) * torch.exp(-log_scale)], dim=-1)


class Glow(nn.Module):
    def __init__(self, dim, n_steps, hidden, fixed=False):
        super().__init__()
        layers = []
        for _ in range(n_steps):
            layers += [ActNorm(dim), LULinear(dim, fixed=fixed), AffineCoupling(dim, hidden)]
        self.layers = nn.ModuleList(layers)
        self.dim = dim

    def forward(self, x):
        total = torch.zeros(x.shape[0], device=x.device)
        for layer in self.layers:
            x, ld = layer(x)
            total = total + ld
        return x, total

    def log_prob(self, x):
        z, logdet = self(x)
        base = -0.5 * (z ** 2).sum(-1) - 0.5 * self.dim * math.log(2 * math.pi)
        return base + logdet

    @torch.no_grad()
    def sample(self, n):
        z = torch.randn(n, self.dim)
        for layer in reversed(self.layers):
            z = layer.inverse(z)
        return z

"""Discretisation-error sweep for DDPM ancestral sampling with an exact denoiser.

The data distribution is a 2-D Gaussian mixture, so the optimal noise
predictor eps*(x_t, t) is available in closed form.  We sample with the
improved-DDPM cosine schedule at several step counts and report how far the
samples are from the target (log-likelihood under the true mixture and a
sliced Wasserstein distance against fresh data).
"""
import argparse
import math
import time
from dataclasses import dataclass

import torch


def betas_for_alpha_bar(num_steps, alpha_bar, max_beta=0.999):
    betas = []
    for i in range(num_steps):
        t1 = i / num_steps
        t2 = (i + 1) / num_steps
        betas.append(min(1 - alpha_bar(t2) / alpha_bar(t1), max_beta))
    return torch.tensor(betas, dtype=torch.float64)


@dataclass
class NoiseSchedule:
    alphas_cumprod: torch.Tensor
    posterior_variance: torch.Tensor
    posterior_mean_coef1: torch.Tensor
    posterior_mean_coef2: torch.Tensor

    @classmethod
    def cosine(cls, num_steps, s=0.008):
        betas = betas_for_alpha_bar(
            num_steps, lambda t: math.cos((t + s) / (1 + s) * math.pi / 2) ** 2)
        alphas = 1.0 - betas
        ac = torch.cumprod(alphas, 0)
        ac_prev = torch.cat([torch.ones(1, dtype=ac.dtype), ac[:-1]])
        post_var = betas * (1.0 - ac_prev) / (1.0 - ac)
        coef1 = betas * ac_prev.sqrt() / (1.0 - ac)
        coef2 = (1.0 - ac_prev) * alphas.sqrt() / (1.0 - ac)
        return cls(ac.float(), post_var.float(), coef1.float(), coef2.float())


class GaussianMixture:
    def __init__(self, n_modes=12, radius=4.0, std=0.35):
        angles = torch.arange(n_modes) * (2 * math.pi / n_modes)
        self.means = radius * torch.stack([angles.cos(), angles.sin()], -1)
        self.means[::2] *= 0.5  # two rings
        self.var = std ** 2
        self.log_w = torch.full((n_modes,), -math.log(n_modes))

    def sample(self, n, gen):
        k = torch.randint(0, self.means.shape[0], (n,), generator=gen)
        return self.means[k] + self.var ** 0.5 * torch.randn(n, 2, generator=gen)

    def _component_logpdf(self, x, means, var):
        d2 = ((x[:, None, :] - means[None]) ** 2).sum(-1)
        return self.log_w - 0.5 * d2 / var - math.log(2 * math.pi * var)

    def log_prob(self, x):
        return torch.logsumexp(self._component_logpdf(x, self.means, self.var), -1)

    def optimal_eps(self, x_t, alpha_bar):
        """E[eps | x_t] for the diffused mixture at noise level alpha_bar."""
        m = alpha_bar.sqrt() * self.means
        v = alpha_bar * self.var + (1.0 - alpha_bar)
        resp = torch.softmax(self._component_logpdf(x_t, m, v), -1)
        score = -(x_t[:, None, :] - m[None]) / v
        score = (resp[..., None] * score).sum(1)
        return -(1.0 - alpha_bar).sqrt() * score


def ddpm_step(x, i, num_steps, model, gen, sched=None):
    """One ancestral step x_i -> x_{i-1} of a num_steps-step cosine-schedule DDPM."""
    if sched is None:
        sched = NoiseSchedule.cosine(num_steps)  # PLANTED
    ab = sched.alphas_cumprod[i]
    eps = model.optimal_eps(x, ab)
    x0 = (x - (1.0 - ab).sqrt() * eps) / ab.sqrt()
    x0 = x0.clamp(-8.0, 8.0)
    mean = sched.posterior_mean_coef1[i] * x0 + sched.posterior_mean_coef2[i] * x
    if i == 0:
        return mean
    return mean + sched.posterior_variance[i].sqrt() * torch.randn(x.shape, generator=gen)


def sample(model, n, num_steps, gen, fixed=False):
    sched = NoiseSchedule.cosine(num_steps) if fixed else None
    x = torch.randn(n, 2, generator=gen)
    for i in reversed(range(num_steps)):
        x = ddpm_step(x, i, num_steps, model, gen, sched=sched)
    return x


def sliced_wasserstein(a, b, n_proj=256, gen=None):
    theta = torch.randn(2, n_proj, generator=gen)
    theta = theta / theta.norm(dim=0, keepdim=True)
    pa, _ = torch.sort(a @ theta, 0)
    pb, _ = torch.sort(b @ theta, 0)
    return ((pa - pb) ** 2).mean().sqrt().item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--steps", type=int, nargs="+", default=[100, 500, 1000, 2000, 2500])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()

    gmm = GaussianMixture()
    gen = torch.Generator().manual_seed(args.seed)
    reference = gmm.sample(args.n, gen)
    print(f"reference log-lik {gmm.log_prob(reference).mean():.4f}")

    print(f"{'steps':>6} {'log-lik':>9} {'SW2':>8} {'time[s]':>8}")
    for num_steps in args.steps:
        t0 = time.time()
        gen.manual_seed(args.seed + num_steps)
        x = sample(gmm, args.n, num_steps, gen, fixed=args.fixed)
        ll = gmm.log_prob(x).mean().item()
        sw = sliced_wasserstein(x, reference, gen=gen)
        print(f"{num_steps:6d} {ll:9.4f} {sw:8.4f} {time.time() - t0:8.2f}")


if __name__ == "__main__":
    main()

"""Ordinary Gaussian-process kriging of volumetric soil moisture.

Synthetic campaign: a few thousand TDR probe readings scattered over a
10 km x 10 km catchment.  We fit a Matern-5/2 GP (constant mean, signal
variance, length scale, nugget) by maximising the log marginal likelihood,
krige the field onto a regular grid with predictive variances, and report a
leave-one-out cross-validation score at the fitted hyperparameters.

Usage:
    python u_gp_kriging.py [--n-sites 2000] [--grid 100] [--fit-iters 10]
"""
import argparse
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

DTYPE = torch.float64
SQRT5 = math.sqrt(5.0)


@dataclass
class GPHyper:
    mean: float
    signal_var: float
    length_scale: float
    noise_var: float


# --------------------------------------------------------------------------
# synthetic data
# --------------------------------------------------------------------------
def true_moisture(xy, rng_state):
    """Smooth 'true' soil moisture field (m3/m3) from random Fourier features
    plus a gentle wetness gradient towards the valley floor (low y)."""
    w, b, a = rng_state
    proj = xy @ w.T + b                      # (N, F)
    field = (a * torch.cos(proj)).sum(-1) / math.sqrt(w.shape[0])
    valley = 0.06 * torch.exp(-xy[:, 1] / 3.0)
    return 0.24 + 0.05 * field + valley


def make_campaign(n_sites, domain_km, noise_sd, seed):
    g = torch.Generator().manual_seed(seed)
    n_feat = 256
    w = torch.randn(n_feat, 2, generator=g, dtype=DTYPE) / 1.4   # ~1.4 km correlation
    b = 2 * math.pi * torch.rand(n_feat, generator=g, dtype=DTYPE)
    a = torch.randn(n_feat, generator=g, dtype=DTYPE)
    field = (w, b, a)

    # probes are clustered along a few transects plus uniform background sites
    n_tr = n_sites // 3
    centres = torch.rand(6, 2, generator=g, dtype=DTYPE) * domain_km
    which = torch.randint(0, 6, (n_tr,), generator=g)
    tr = centres[which] + 0.6 * torch.randn(n_tr, 2, generator=g, dtype=DTYPE)
    bg = torch.rand(n_sites - n_tr, 2, generator=g, dtype=DTYPE) * domain_km
    xy = torch.cat([tr, bg]).clamp(0.0, domain_km)

    y = true_moisture(xy, field) + noise_sd * torch.randn(n_sites, generator=g, dtype=DTYPE)
    return xy, y, field


# --------------------------------------------------------------------------
# GP pieces
# --------------------------------------------------------------------------
def matern52(dist, length_scale, signal_var):
    r = SQRT5 * dist / length_scale
    return signal_var * (1.0 + r + r * r / 3.0) * torch.exp(-r)


def unpack(raw):
    """Unconstrained parameters -> positive hyperparameters."""
    mean = raw["mean"]
    signal_var = torch.nn.functional.softplus(raw["log_sv"])
    length_scale = torch.nn.functional.softplus(raw["log_ls"])
    noise_var = torch.nn.functional.softplus(raw["log_nv"]) + 1e-6
    return mean, signal_var, length_scale, noise_var


def neg_log_marginal_likelihood(dist, y, raw):
    mean, sv, ls, nv = unpack(raw)
    n = y.shape[0]
    K = matern52(dist, ls, sv)
    K = K + nv * torch.eye(n, dtype=DTYPE)
    L = torch.linalg.cholesky(K)
    resid = (y - mean).unsqueeze(-1)
    alpha = torch.cholesky_solve(resid, L)
    data_fit = 0.5 * (resid * alpha).sum()
    complexity = torch.log(torch.diagonal(L)).sum()
    return (data_fit + complexity) / n + 0.5 * math.log(2 * math.pi)


def fit_hyperparameters(xy, y, iters, lr):
    """Type-II maximum likelihood with L-BFGS on the unconstrained parameters."""
    dist = torch.cdist(xy, xy)
    inv_sp = lambda v: math.log(math.expm1(v))
    raw = {
        "mean": torch.tensor(float(y.mean()), dtype=DTYPE, requires_grad=True),
        "log_sv": torch.tensor(inv_sp(float(y.var())), dtype=DTYPE, requires_grad=True),
        "log_ls": torch.tensor(inv_sp(1.0), dtype=DTYPE, requires_grad=True),
        "log_nv": torch.tensor(inv_sp(0.1 * float(y.var())), dtype=DTYPE, requires_grad=True),
    }
    opt = torch.optim.LBFGS(raw.values(), lr=lr, max_iter=iters, history_size=10,
                            line_search_fn="strong_wolfe")
    trace = []

    def closure():
        opt.zero_grad()
        loss = neg_log_marginal_likelihood(dist, y, raw)
        loss.backward()
        trace.append(loss.item())
        return loss

    opt.step(closure)
    for k in range(0, len(trace), 5):
        print(f"  eval {k + 1:3d}  nlml/n {trace[k]:+.5f}")
    m, sv, ls, nv = unpack({k: v.detach() for k, v in raw.items()})
    print(f"  {len(trace)} likelihood evaluations, final nlml/n {trace[-1]:+.5f}")
    return GPHyper(float(m), float(sv), float(ls), float(nv))


def condition(xy, y, hp):
    """Cholesky factor and weights of the kriging system for training sites."""
    K = matern52(torch.cdist(xy, xy), hp.length_scale, hp.signal_var)
    K += hp.noise_var * torch.eye(xy.shape[0], dtype=DTYPE)
    L = torch.linalg.cholesky(K)
    alpha = torch.cholesky_solve((y - hp.mean).unsqueeze(-1), L).squeeze(-1)
    return L, alpha


def predict(xy_train, L, alpha, hp, xy_test, chunk, fixed=False):
    """Posterior mean and latent-field variance at xy_test, `chunk` points at a time."""
    means, variances = [], []
    for start in range(0, xy_test.shape[0], chunk):
        xs = xy_test[start:start + chunk]
        k_star = matern52(torch.cdist(xy_train, xs), hp.length_scale, hp.signal_var)
        mu = hp.mean + k_star.T @ alpha
        v = torch.linalg.solve_triangular(L, k_star, upper=False)
        if fixed:
            var = hp.signal_var - (v * v).sum(0)
        else:
            k_ss = matern52(torch.cdist(xs, xs), hp.length_scale, hp.signal_var)
            cov = k_ss - v.T @ v  # PLANTED
            var = torch.diagonal(cov)
        means.append(mu)
        variances.append(var.clamp_min(1e-12))
    return torch.cat(means), torch.cat(variances)


def loo_cross_validation(L, alpha, y):
    """Closed-form leave-one-out predictive scores (Rasmussen & Williams sec. 5.4.2)."""
    eye = torch.eye(L.shape[0], dtype=L.dtype)
    l_inv = torch.linalg.solve_triangular(L, eye, upper=False)
    k_inv_diag = (l_inv * l_inv).sum(0)      # diag of K^-1 = column norms of L^-1
    var_y = 1.0 / k_inv_diag
    err = alpha * var_y                      # y_i - mu_{-i}
    nlpd = 0.5 * (torch.log(2 * math.pi * var_y) + err ** 2 / var_y)
    return {
        "rmse": float((err ** 2).mean().sqrt()),
        "smse": float((err ** 2).mean() / y.var()),
        "nlpd": float(nlpd.mean()),
        "cover95": float((err.abs() <= 1.96 * var_y.sqrt()).double().mean()),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-sites", type=int, default=2000)
    p.add_argument("--fit-subset", type=int, default=180,
                   help="sites used for the marginal-likelihood fit")
    p.add_argument("--domain-km", type=float, default=10.0)
    p.add_argument("--noise-sd", type=float, default=0.015)
    p.add_argument("--fit-iters", type=int, default=10)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--grid", type=int, default=100, help="grid cells per side")
    p.add_argument("--chunk", type=int, default=8192)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default=None, help="optional .npz for the kriged map")
    p.add_argument("--fixed", action="store_true")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    xy, y, field = make_campaign(args.n_sites, args.domain_km, args.noise_sd, args.seed)
    print(f"campaign: {args.n_sites} sites, moisture {y.mean():.4f} +- {y.std():.4f} m3/m3")

    sub = torch.randperm(args.n_sites, generator=torch.Generator().manual_seed(args.seed))
    sub = sub[:args.fit_subset]
    print(f"fitting Matern-5/2 hyperparameters on {sub.numel()} sites (L-BFGS, {args.fit_iters} it)")
    hp = fit_hyperparameters(xy[sub], y[sub], args.fit_iters, args.lr)
    print(f"fitted: mean {hp.mean:.4f}  sill {hp.signal_var:.3e}  range {hp.length_scale:.3f} km  "
          f"nugget {hp.noise_var:.3e} (true {args.noise_sd ** 2:.3e})")
    t_fit = time.perf_counter()

    L, alpha = condition(xy, y, hp)
    axis = torch.linspace(0.0, args.domain_km, args.grid, dtype=DTYPE)
    gx, gy = torch.meshgrid(axis, axis, indexing="xy")
    grid_xy = torch.stack([gx.reshape(-1), gy.reshape(-1)], dim=1)
    mu, var = predict(xy, L, alpha, hp, grid_xy, args.chunk, args.fixed)
    truth = true_moisture(grid_xy, field)
    grid_rmse = float(((mu - truth) ** 2).mean().sqrt())
    sd = var.sqrt()
    print(f"kriged {grid_xy.shape[0]} grid nodes: mean {mu.mean():.4f}  "
          f"range [{mu.min():.4f}, {mu.max():.4f}]  kriging sd {sd.mean():.4f} "
          f"(max {sd.max():.4f})  rmse vs truth {grid_rmse:.4f}")
    t_pred = time.perf_counter()

    cv = loo_cross_validation(L, alpha, y)
    print(f"LOO CV: rmse {cv['rmse']:.4f}  smse {cv['smse']:.4f}  "
          f"nlpd {cv['nlpd']:.4f}  95% coverage {cv['cover95']:.3f}")
    t_cv = time.perf_counter()

    if args.out:
        np.savez(args.out, mean=mu.reshape(args.grid, args.grid).numpy(),
                 sd=sd.reshape(args.grid, args.grid).numpy(), axis=axis.numpy())
    print(f"time: fit {t_fit - t0:.1f}s  krige {t_pred - t_fit:.1f}s  cv {t_cv - t_pred:.1f}s")


if __name__ == "__main__":
    main()

"""Transient heat conduction in a composite rod (Crank-Nicolson, finite differences).

Batch job: for a set of heating scenarios (different initial temperature profiles
and boundary temperatures) integrate the 1D heat equation
    rho*c * dT/dt = d/dx( k(x) dT/dx ) + q(x, t)
and report when each scenario's hot-spot falls below a safety limit.
"""
import argparse
import math

import torch


def conductivity_profile(n, length):
    """Three-layer composite: steel | ceramic insulation | copper."""
    x = torch.linspace(0.0, length, n + 2)
    k = torch.full_like(x, 45.0)
    k[(x > 0.3 * length) & (x <= 0.55 * length)] = 2.5
    k[x > 0.55 * length] = 390.0
    rho_c = torch.full_like(x, 3.8e6)
    rho_c[(x > 0.3 * length) & (x <= 0.55 * length)] = 2.9e6
    rho_c[x > 0.55 * length] = 3.4e6
    return x, k, rho_c


def assemble_operator(k, rho_c, dx):
    """Dense second-difference operator L (interior nodes) with harmonic-mean face conductivities."""
    k_face = 2 * k[:-1] * k[1:] / (k[:-1] + k[1:])  # n+1 faces
    inv = 1.0 / (rho_c[1:-1] * dx * dx)
    lower = k_face[1:-1] * inv[1:]
    upper = k_face[1:-1] * inv[:-1]
    diag = -(k_face[:-1] + k_face[1:]) * inv
    L = torch.diag(diag) + torch.diag(upper, 1) + torch.diag(lower, -1)
    # coefficients that couple the first/last interior node to the Dirichlet boundary values
    bc_left = k_face[0] * inv[0]
    bc_right = k_face[-1] * inv[-1]
    return L, bc_left, bc_right


def initial_profiles(x, n_scenarios, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = 0.1 + 0.8 * torch.rand(n_scenarios, 1, generator=g)
    widths = 0.02 + 0.08 * torch.rand(n_scenarios, 1, generator=g)
    peaks = 400.0 + 600.0 * torch.rand(n_scenarios, 1, generator=g)
    xi = (x[1:-1] / x[-1]).unsqueeze(0)
    return 293.0 + peaks * torch.exp(-0.5 * ((xi - centers) / widths) ** 2)  # (S, n)


def source_term(x, t, n_scenarios):
    """Pulsed heater embedded in the steel layer, switched off after 60 s."""
    xi = x[1:-1] / x[-1]
    profile = torch.exp(-0.5 * ((xi - 0.15) / 0.03) ** 2) * 2.0e6
    on = 1.0 if t < 60.0 else 0.0
    pulse = on * (0.5 + 0.5 * math.sin(2 * math.pi * t / 20.0))
    return (pulse * profile / 3.8e6).expand(n_scenarios, -1)


def crank_nicolson(L, bc_left, bc_right, T0, t_left, t_right, x, dt, n_steps, fixed=False):
    """Yields (t, T) after every step. T has shape (S, n)."""
    n = L.shape[0]
    eye = torch.eye(n)
    A = eye - 0.5 * dt * L
    B = eye + 0.5 * dt * L
    bc = torch.zeros(T0.shape[0], n)
    bc[:, 0] = bc_left * t_left
    bc[:, -1] = bc_right * t_right
    if fixed:
        lu, piv = torch.linalg.lu_factor(A)
    T = T0.clone()
    t = 0.0
    for _ in range(n_steps):
        q_mid = 0.5 * (source_term(x, t, T.shape[0]) + source_term(x, t + dt, T.shape[0]))
        rhs = (T @ B.T + dt * (bc + q_mid)).T  # (n, S)
        if fixed:
            T = torch.linalg.lu_solve(lu, piv, rhs).T
        else:
            T = torch.linalg.solve(A, rhs).T  # PLANTED
        t += dt
        yield t, T


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1200)
    parser.add_argument("--scenarios", type=int, default=48)
    parser.add_argument("--t-end", type=float, default=300.0)
    parser.add_argument("--dt", type=float, default=1.0)
    parser.add_argument("--limit", type=float, default=450.0)
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()

    length = 0.4
    x, k, rho_c = conductivity_profile(args.nodes, length)
    dx = length / (args.nodes + 1)
    L, bc_left, bc_right = assemble_operator(k, rho_c, dx)
    T0 = initial_profiles(x, args.scenarios)
    g = torch.Generator().manual_seed(1)
    t_left = 293.0 + 40.0 * torch.rand(args.scenarios, generator=g)
    t_right = 293.0 + 40.0 * torch.rand(args.scenarios, generator=g)

    n_steps = int(round(args.t_end / args.dt))
    safe_at = torch.full((args.scenarios,), float("nan"))
    peak_history = []
    for t, T in crank_nicolson(L, bc_left, bc_right, T0, t_left, t_right, x, args.dt, n_steps, fixed=args.fixed):
        peak = T.amax(dim=1)
        peak_history.append(peak)
        newly_safe = torch.isnan(safe_at) & (peak < args.limit)
        safe_at[newly_safe] = t

    peaks = torch.stack(peak_history)
    print(f"steps: {n_steps}  nodes: {args.nodes}  scenarios: {args.scenarios}")
    print(f"max temperature seen: {peaks.max().item():.1f} K   final mean peak: {peaks[-1].mean().item():.1f} K")
    n_safe = int((~torch.isnan(safe_at)).sum())
    print(f"scenarios below {args.limit:.0f} K by t={args.t_end:.0f}s: {n_safe}/{args.scenarios}"
          f"  (median time {safe_at.nanmedian().item():.1f}s)")


if __name__ == "__main__":
    main()

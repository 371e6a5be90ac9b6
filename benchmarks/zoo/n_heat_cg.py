"""Transient 2-D heat conduction with a moving laser source (implicit FD solver).

Solves  du/dt = div(kappa grad u) - c(x, y) u + s(x, y, t)  on the unit square
with homogeneous Dirichlet boundaries, second-order finite differences on a
64x64 interior grid and backward-Euler time stepping. Every implicit step solves
(I + dt*(kappa*L + diag(c))) u_new = u_old + dt*s  with Jacobi-preconditioned
conjugate gradients, warm-started from the previous solution. The operator is
assembled once from Kronecker products of the 1-D second-difference matrix.
The program is written as plain functions plus a generator that yields the
solution after every time step; a few diagnostics are printed at the end.

Planted problem:
    assemble_operator() (lines 56-58) returns the 2-D system matrix exactly as it
    comes out of torch.kron: a dense 4096x4096 float32 tensor (64 MiB) that has
    only ~5 non-zeros per row. Every CG iteration's `A @ p` in pcg() (line 84) is a
    dense matrix-vector product that streams the whole 64 MiB matrix from
    memory (~16.7M multiply-adds for ~20k useful ones), and the solver does
    ~2,400 of them (70 time steps x ~34 iterations).
Fix (--fixed):
    In main(), convert the assembled operator to compressed sparse row storage
    once (`A = A.to_sparse_csr()`), so each `A @ p` touches only the ~20k stored
    non-zeros. Same operator, same CG iterates (up to float32 summation order).
"""
import argparse
import math
import time
import warnings

import torch

N_GRID = 64          # interior points per side
KAPPA = 1.0
DT = 2.0e-3
N_STEPS = 70
CG_TOL = 1e-5
CG_MAXITER = 400


def grid_coordinates(n):
    h = 1.0 / (n + 1)
    x = torch.linspace(h, 1.0 - h, n)
    yy, xx = torch.meshgrid(x, x, indexing="ij")
    return h, xx.reshape(-1), yy.reshape(-1)


def second_difference(n, h):
    main = torch.full((n,), 2.0)
    off = torch.full((n - 1,), -1.0)
    return (torch.diag(main) + torch.diag(off, 1) + torch.diag(off, -1)) / h**2


def assemble_operator(n, h, absorption, dt, kappa):
    """System matrix I + dt*(kappa*L + diag(c)) for backward Euler."""
    t1 = second_difference(n, h)
    eye = torch.eye(n)
    lap = torch.kron(eye, t1) + torch.kron(t1, eye)
    A = torch.eye(n * n) + dt * (kappa * lap + torch.diag(absorption))
    return A, A.diagonal().clone()


def absorption_field(xx, yy):
    # Cooling is stronger near a circular "heat sink" region.
    r2 = (xx - 0.7) ** 2 + (yy - 0.3) ** 2
    return 5.0 + 40.0 * torch.exp(-r2 / 0.01)


def laser_source(xx, yy, t, power=400.0, width=0.05):
    # Spot moving on a circle of radius 0.25 around the centre.
    cx = 0.5 + 0.25 * math.cos(2 * math.pi * 4.0 * t)
    cy = 0.5 + 0.25 * math.sin(2 * math.pi * 4.0 * t)
    return power * torch.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * width**2))


def pcg(A, b, x0, diag, tol=CG_TOL, maxiter=CG_MAXITER):
    """Jacobi-preconditioned conjugate gradients. Returns (x, iterations)."""
    inv_d = 1.0 / diag
    x = x0.clone()
    r = b - A @ x
    z = inv_d * r
    p = z.clone()
    rz = torch.dot(r, z)
    b_norm = torch.linalg.vector_norm(b)
    for it in range(1, maxiter + 1):
        Ap = A @ p  # PLANTED
        alpha = rz / torch.dot(p, Ap)
        x.add_(alpha * p)
        r.sub_(alpha * Ap)
        if torch.linalg.vector_norm(r) <= tol * b_norm:
            return x, it
        z = inv_d * r
        rz_new = torch.dot(r, z)
        p = z + (rz_new / rz) * p
        rz = rz_new
    return x, maxiter


def backward_euler(A, diag, u0, source, xx, yy, dt, n_steps):
    """Generator yielding (step, time, u, cg_iterations) after each step."""
    u = u0
    for k in range(1, n_steps + 1):
        t = k * dt
        rhs = u + dt * source(xx, yy, t)
        u, iters = pcg(A, rhs, u, diag)
        yield k, t, u, iters


def main():
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", message="Sparse CSR tensor support")
    torch.manual_seed(0)

    h, xx, yy = grid_coordinates(N_GRID)
    c = absorption_field(xx, yy)
    A, diag = assemble_operator(N_GRID, h, c, DT, KAPPA)
    if args.fixed:
        A = A.to_sparse_csr()
    u0 = 0.05 * torch.rand(N_GRID * N_GRID)  # small random initial temperature

    t0 = time.perf_counter()
    total_iters = 0
    peak = []
    for k, t, u, iters in backward_euler(A, diag, u0, laser_source, xx, yy, DT, N_STEPS):
        total_iters += iters
        peak.append(u.max())
        if k % 10 == 0:
            print(f"step {k:3d} t={t:.3f}  cg_iters={iters:3d}  max T={float(u.max()):.4f}")
    dt_wall = time.perf_counter() - t0

    field = u.view(N_GRID, N_GRID)
    energy = float(field.sum() * h * h)
    hot = torch.stack(peak)
    print(f"total CG iterations: {total_iters}, solve time {dt_wall:.2f}s")
    print(f"final energy {energy:.6f}, hottest step {int(hot.argmax()) + 1}, "
          f"peak T {float(hot.max()):.4f}")


if __name__ == "__main__":
    main()

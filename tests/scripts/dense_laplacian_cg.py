"""Solves a 2-D Poisson problem with conjugate gradients written as plain functions (no module):
the 5-point Laplacian is assembled dense (under 0.5 % non-zeros), so every iteration's product
multiplies each zero."""
import sys

import torch


def laplacian(side):
    eye = torch.eye(side)
    tri = 2 * eye - torch.diag(torch.ones(side - 1), 1) - torch.diag(torch.ones(side - 1), -1)
    return torch.kron(tri, eye) + torch.kron(eye, tri)


def conjugate_gradients(A, b, iterations):
    x = torch.zeros_like(b)
    r = b.clone()
    p = r.clone()
    rr = r @ r
    for _ in range(iterations):
        Ap = A @ p  # PLANTED
        alpha = rr / (p @ Ap)
        x += alpha * p
        r -= alpha * Ap
        rr, rr_old = r @ r, rr
        p = r + (rr / rr_old) * p
    return x


A = laplacian(64)
if "--fixed" in sys.argv:
    A = A.to_sparse_csr()
b = torch.randn(A.shape[0])
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 3):
    x = conjugate_gradients(A, b, 100)
print(f"residual {torch.linalg.vector_norm(A @ x - b).item():.3e}")

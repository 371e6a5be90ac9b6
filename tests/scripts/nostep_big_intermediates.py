"""No step clock: a nearest-neighbour scorer whose every query chunk first refines its queries
(an SVD, most of the chunk's time, little memory) and then builds a large broadcast difference
(chunk x bank x features, ~100 MB, and its square) and frees it: memory in use jumps by ~200 MB
for a moment in every chunk while the profiler records few events (test_capture_plan.py: the
slice must not take that for the profiler's own memory)."""
import sys

import torch

torch.manual_seed(0)
BANK = torch.randn(3000, 64)
BASIS = torch.randn(1000, 1000)


def refine(q):
    u, _, _ = torch.linalg.svd(BASIS + q.sum())
    return q + 1e-3 * u[: q.shape[0], : q.shape[1]]


def distances(q):
    return ((q[:, None, :] - BANK[None, :, :]) ** 2).sum(-1)  # PLANTED


def scores(chunks):
    for q in chunks:
        yield distances(refine(q)).topk(5, dim=1, largest=False).values.mean()


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    total = sum(float(s) for s in scores(torch.randn(128, 64) for _ in range(n)))
    print("score", round(total, 3))

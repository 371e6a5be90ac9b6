"""k-step transition probabilities of a Markov chain with a hand-written Strassen product, checked by simulation.

P^k is computed by repeated squaring; each product uses Strassen's seven-multiplication recursion.
"""
import argparse

import torch


def strassen(a, b, leaf):
    """a @ b for square matrices whose size is a power of two, recursing down to `leaf` x `leaf` blocks."""
    n = a.shape[0]
    if n <= leaf:
        return a @ b
    h = n // 2
    a11, a12, a21, a22 = a[:h, :h], a[:h, h:], a[h:, :h], a[h:, h:]
    b11, b12, b21, b22 = b[:h, :h], b[:h, h:], b[h:, :h], b[h:, h:]
    m1 = strassen(a11 + a22, b11 + b22, leaf)
    m2 = strassen(a21 + a22, b11, leaf)
    m3 = strassen(a11, b12 - b22, leaf)
    m4 = strassen(a22, b21 - b11, leaf)
    m5 = strassen(a11 + a12, b22, leaf)
    m6 = strassen(a21 - a11, b11 + b12, leaf)
    m7 = strassen(a12 - a22, b21 + b22, leaf)
    top = torch.cat([m1 + m4 - m5 + m7, m3 + m5], dim=1)
    bottom = torch.cat([m2 + m4, m1 - m2 + m3 + m6], dim=1)
    return torch.cat([top, bottom], dim=0)


def matrix_power(p, k, leaf):
    result = torch.eye(p.shape[0], dtype=p.dtype)
    while k:
        if k & 1:
            result = strassen(result, p, leaf)
        p = strassen(p, p, leaf)
        k >>= 1
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--states", type=int, default=64)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--walkers", type=int, default=100_000)
    ap.add_argument("--fixed", action="store_true", help="stop the recursion at 64x64 blocks")
    args = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(args.states, args.states, generator=g) * 2
    p = logits.softmax(dim=1)  # row-stochastic transition matrix
    pk = matrix_power(p, args.steps, leaf=64 if args.fixed else 1)  # PLANTED
    # cross-check against a simulation: walkers started uniformly, stepped `steps` times
    walkers = torch.randint(0, args.states, (args.walkers,), generator=g)
    start = walkers.clone()
    for _ in range(args.steps):
        walkers = torch.multinomial(p[walkers], 1, generator=g).squeeze(1)
    empirical = torch.zeros(args.states, args.states).index_put_((start, walkers), torch.ones(args.walkers),
                                                                 accumulate=True)
    empirical /= empirical.sum(1, keepdim=True).clamp(min=1)
    print(f"row sums {pk.sum(1).min():.5f}..{pk.sum(1).max():.5f}; "
          f"largest gap to the simulation {(empirical - pk).abs().max():.4f}")


if __name__ == "__main__":
    main()

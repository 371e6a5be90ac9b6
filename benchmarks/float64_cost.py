"""What float32 saves over float64 on this CPU: the basis of `DtypeFloat64.CPU_SAVING`.

    OMP_NUM_THREADS=1 python benchmarks/float64_cost.py [--repeat 5]

Times the ops float64 programs spend their time in (elementwise arithmetic, transcendental
functions, reductions, a matrix product), each on float64 and float32 copies of the same data,
turn about (interleaved, `--repeat` rounds, the best of a few calls each), at sizes from inside
the L2 cache to far beyond the L3 (a 16 M-element tensor: 128 MB in float64). Prints each op's
float64/float32 time ratio per size and the share of the float64 time float32 saves (1 - 1/ratio),
then the median share over all ops and sizes: what the rule claims for a CPU op.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

SIZES = (1 << 16, 1 << 20, 1 << 24)
OPS = {
    "add": lambda x: x + x,
    "mul": lambda x: x * 1.5,
    "sigmoid": torch.sigmoid,
    "exp": torch.exp,
    "log": lambda x: torch.log(x + 1.0),
    "sum": torch.sum,
    "softmax": lambda x: torch.softmax(x.view(-1, 256), dim=-1),
    "matmul": lambda x: x.view(-1, 256)[:4096] @ x.view(-1, 256)[:256].T,
}


def best_of(fn, x, calls: int = 5) -> float:
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(x)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    shares = []
    print(f"{'op':9s}" + "".join(f"{n:>16d}" for n in SIZES) + "   (float64 / float32 time, median of rounds)")
    for name, fn in OPS.items():
        row = []
        for n in SIZES:
            x64 = torch.rand(max(n, 1 << 20) if name == "matmul" else n, dtype=torch.float64)
            x32 = x64.float()
            fn(x64), fn(x32)  # warm
            ratios = []
            for _ in range(args.repeat):  # turn about: the machine's drift hits both alike
                ratios.append(best_of(fn, x64) / best_of(fn, x32))
            r = statistics.median(ratios)
            shares.append(1 - 1 / r)
            row.append(f"{r:16.2f}")
        print(f"{name:9s}" + "".join(row))
    print(f"\nshare of float64 op time float32 saves: median {statistics.median(shares):.2f}, "
          f"range {min(shares):.2f}-{max(shares):.2f}")


if __name__ == "__main__":
    main()

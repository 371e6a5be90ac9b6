"""How much do unaligned half-precision matmul shapes cost on this GPU?

    python benchmarks/gemm_alignment.py [--json OUT]

Times bf16 and fp16 matrix products (CUDA events, median of repeated runs after warm-up, fresh
random inputs) whose K or N is odd or not a multiple of 8, beside the same product padded to a
multiple of 64, and prints the slowdown. The unaligned_matmul rule's saving estimate rests on
these ratios (see its docstring); rerun on a new GPU generation.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

SHAPES = [  # (M, N, K): the unaligned dimension, then the padded one
    ("K odd", (4096, 1024, 50257), (4096, 1024, 50304)),
    ("N odd", (8192, 50257, 1024), (8192, 50304, 1024)),
    ("K = 1023", (8192, 4096, 1023), (8192, 4096, 1024)),
    ("K % 8 = 4", (8192, 4096, 1020), (8192, 4096, 1024)),
    ("M odd", (8191, 4096, 4096), (8192, 4096, 4096)),
]


def time_mm(m: int, n: int, k: int, dtype: torch.dtype, repeat: int = 20) -> float:
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the figures here")
    ns = ap.parse_args()
    rows = []
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print(f"{'case':12s} {'dtype':9s} {'unaligned ms':>12s} {'padded ms':>9s} {'slowdown':>8s}")
    for name, bad, good in SHAPES:
        for dtype in (torch.bfloat16, torch.float16):
            t_bad, t_good = time_mm(*bad, dtype), time_mm(*good, dtype)
            flops = 2 * bad[0] * bad[1] * bad[2]
            rows.append({"case": name, "dtype": str(dtype).removeprefix("torch."), "unaligned": bad, "padded": good,
                         "unaligned_ms": t_bad, "padded_ms": t_good, "slowdown": t_bad / t_good,
                         "unaligned_tflops": flops / t_bad / 1e9})
            print(f"{name:12s} {rows[-1]['dtype']:9s} {t_bad:12.3f} {t_good:9.3f} {t_bad / t_good:7.2f}x")
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

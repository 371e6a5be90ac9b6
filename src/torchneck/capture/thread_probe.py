"""A short experiment after the script ends, run only when the script left more intra-op threads
than usable cores: time one op of each kind a CPU step runs (a matmul, a convolution's backward,
an element-wise op), small and large, with the script's thread count and with one thread per
core, interleaved, and record each one's slowdown.

"16 threads on 4 cores" is a risk, not a cost: OpenMP's idle threads may sleep quietly, or spin
and steal the cores from the ones doing the work, depending on the runtime, the machine and the
other load. The probe measures which one it is on this machine, so the finding carries a number
(or stays quiet when there is no cost). What it costs depends on the op: every parallel region
wakes and joins all the threads, time-sliced on too few cores, and spinning workers slow the ops
after it; a small op pays that in full, a big matmul amortises it, a convolution's backward opens
many regions a call. One big matmul understates it for most programs: the rule applies to each of
the program's ops the slowdown of its kind at its time per call. It takes ~1-2 s, after the
script's own work.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

ROUNDS = 5
MIN_TIMED_S = 0.004
"""ROUNDS interleaved pairs (script's threads, cores) per kind, each timing calls one by one for at
least 4 ms; the fastest round's median call compared: other processes' load only ever adds time (a
thread of the `cores` ones descheduled holds up the whole region), too many threads cost every call."""
SIZES = {"small": (128, (4, 16, 16, 16)), "large": (512, (8, 32, 48, 48))}
"""Per size: the side of the square matmul and element-wise tensors, and the batch, channels,
height, width of the 3x3 convolution. Small: ~0.02-0.3 ms a call on one core, where waking and
joining the threads weighs most; large: ~1-5 ms, where it is amortised. The rule reads the
slowdown at each op's time per call between the two."""


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. a container's or taskset's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _layers(width: int, conv: tuple[int, int, int, int]) -> dict[str, tuple[str, Callable[[], object]]]:
    """Per kind of op: (what it runs, one call of it). One op a call, so that the time per call
    compares with a program's op's; a convolution's backward, the heaviest op of a CNN's step."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(width, width, generator=g), torch.randn(width, width, generator=g)
    img = torch.randn(*conv, generator=g)
    k = torch.randn(conv[1], conv[1], 3, 3, generator=g)
    out = F.conv2d(img, k, padding=1)
    backward, needed = torch.ops.aten.convolution_backward, [True, True, False]  # input, weight, no bias
    shape = "x".join(map(str, conv))
    return {"matmul": (f"mm {width}x{width}", lambda: torch.mm(x, w)),
            "conv": (f"conv2d 3x3 backward on {shape}",
                     lambda: backward(out, img, k, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, needed)),
            "elementwise": (f"gelu on {width}x{width}", lambda: F.gelu(x))}


def probe_oversubscription(threads: int, cores: int) -> dict | None:
    """The measured slowdown of each kind of op (`kinds`: per kind, a small and a large size) at
    `threads` intra-op threads versus `cores` threads; None when the threads fit the cores. The
    thread setting is restored afterwards. `slowdown` (the large matmul's) is the one figure
    older readers know."""
    if cores < 1 or threads <= cores:
        return None
    import torch

    def per_call(n: int, step: Callable[[], object]) -> float:
        """The median call of those timed one by one over MIN_TIMED_S: a call held up by another
        process (a descheduled thread) is an outlier, a cost every call pays is not."""
        torch.set_num_threads(n)
        step()  # let the pool resize before timing
        times: list[float] = []
        end = time.perf_counter() + MIN_TIMED_S
        while not times or time.perf_counter() < end:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        return sorted(times)[len(times) // 2]

    kinds: dict[str, list[dict]] = {}
    try:
        with torch.no_grad():
            for size, (width, conv) in SIZES.items():
                for kind, (op, step) in _layers(width, conv).items():
                    over, fit = [], []
                    for _ in range(ROUNDS):
                        over.append(per_call(threads, step))
                        fit.append(per_call(cores, step))
                    at_threads, at_cores = min(over), min(fit)
                    kinds.setdefault(kind, []).append({
                        "size": size, "op": op, "seconds_at_threads": at_threads, "seconds_at_cores": at_cores,
                        "slowdown": at_threads / at_cores if at_cores > 0 else None})
    finally:
        torch.set_num_threads(threads)
    mm = kinds["matmul"][-1]
    return {"threads": threads, "cores": cores, "op": mm["op"], "seconds_at_threads": mm["seconds_at_threads"],
            "seconds_at_cores": mm["seconds_at_cores"], "slowdown": mm["slowdown"], "rounds": ROUNDS,
            "kinds": kinds}

"""A compiled function whose toy backend rejects relu (with --wrong, computes it wrongly; with
--crash, kills the process with SIGSEGV as a broken native backend would)."""
import os
import signal
import sys

import torch

WRONG = "--wrong" in sys.argv
CRASH = "--crash" in sys.argv


def toy_backend(gm, example_inputs):
    """Rejects graphs that call relu; with --wrong, silently computes relu as the identity."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in (torch.relu, torch.nn.functional.relu):
            if CRASH:
                os.kill(os.getpid(), signal.SIGSEGV)
            if not WRONG:
                raise NotImplementedError("toy backend: relu is not supported")  # TOY raise
            node.target = torch.clone
    gm.recompile()
    return gm.forward


@torch.compile(backend=toy_backend)
def shift(x):
    y = x * 2
    return torch.relu(y) + 1  # TOY relu


total = 0.0
for _ in range(3):
    total += float(shift(torch.randn(64)).sum())  # TOY call
print("total", total)

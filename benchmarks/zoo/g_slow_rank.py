"""GPU, two ranks: DistributedDataParallel where rank 0 also summarises the gradients each step.

Run with `torchrun --nproc-per-node 2` (both ranks may share one GPU: the process group is gloo).
After every backward, rank 0 alone copies all gradients to the host and computes percentiles in
NumPy for its log; rank 1 reaches the next step's all-reduce first and waits for it. The fix
summarises every 50th step.
"""
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

FIXED = "--fixed" in sys.argv


def grad_percentiles(model: nn.Module) -> list[float]:
    flat = np.concatenate([p.grad.detach().float().cpu().numpy().ravel() for p in model.parameters()])
    return np.percentile(np.abs(flat), [50, 90, 99, 99.9]).tolist()


def main(steps: int = 600) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % max(torch.cuda.device_count(), 1)) \
        if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 512)).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    log = []
    x = torch.randn(256, 512, device=device)
    t0 = time.perf_counter()
    for step in range(steps):
        loss = ddp(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if rank == 0 and (not FIXED or step % 50 == 0):
            log.append(grad_percentiles(model))  # PLANTED: rank 0 alone summarises every gradient each step
    if rank == 0:
        print("steps", steps, "in", round(time.perf_counter() - t0, 2), "s; log rows", len(log))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""DDP on gloo (CPU), launched by torchrun: rank 1's data loading does 30 ms of extra CPU work
(think: decoding), so every gradient all-reduce waits for it. `--fail-rank R` makes rank R
raise after a few steps."""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=14)
parser.add_argument("--sleep", type=float, default=0.03)
parser.add_argument("--fail-rank", type=int, default=-1)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def slow_decode(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:  # PLANTED: a slow input pipeline on rank 1
        pass


def load_batch():
    if rank == 1:
        slow_decode(args.sleep)
    return torch.randn(64, 256), torch.randint(0, 10, (64,))


for step in range(args.steps):
    x, y = load_batch()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    if step == 5 and rank == args.fail_rank:
        raise RuntimeError(f"rank {rank} failed on purpose")
dist.destroy_process_group()
print(f"rank {rank} done", os.environ.get("LOCAL_RANK"))

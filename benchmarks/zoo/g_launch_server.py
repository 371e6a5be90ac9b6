"""GPU: a scoring service answering small requests one at a time with a deep, narrow MLP.

Each request is 16 rows; the model is 24 blocks of Linear(256) + LayerNorm + GELU, so every
request launches ~100 tiny kernels and the GPU waits for the CPU to launch them. The fix replays
the whole forward pass as one CUDA graph (captured once on a static input buffer).
"""
import sys
import time

import torch
from torch import nn

FIXED = "--fixed" in sys.argv
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return x + torch.nn.functional.gelu(self.norm(self.fc(x)))


class ScoringService:
    def __init__(self, width: int = 256, depth: int = 24, batch: int = 16):
        self.model = nn.Sequential(*[Block(width) for _ in range(depth)], nn.Linear(width, 1)).to(DEVICE).eval()
        self.static_in = torch.zeros(batch, width, device=DEVICE)
        self.graph = None
        if FIXED and DEVICE == "cuda":
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.inference_mode():
                for _ in range(3):
                    self.model(self.static_in)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph), torch.inference_mode():
                self.static_out = self.model(self.static_in)

    @torch.inference_mode()
    def score(self, features: torch.Tensor) -> torch.Tensor:
        if self.graph is not None:
            self.static_in.copy_(features, non_blocking=True)
            self.graph.replay()
            return self.static_out.clone()
        return self.model(features.to(DEVICE, non_blocking=True))  # PLANTED: ~100 tiny kernels launched per request


def requests(n: int, batch: int = 16, width: int = 256):
    pool = torch.randn(64, batch, width, device=DEVICE)
    for i in range(n):
        yield i, pool[i % 64]


def serve(n: int) -> float:
    service = ScoringService()
    total = torch.zeros((), device=DEVICE)
    for _, req in requests(n):
        total += service.score(req).mean()
    return float(total)


if __name__ == "__main__":
    t0 = time.perf_counter()
    print("checksum", round(serve(3000), 3), "in", round(time.perf_counter() - t0, 2), "s")

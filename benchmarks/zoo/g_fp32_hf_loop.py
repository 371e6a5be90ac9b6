"""GPU: a Hugging-Face-style training loop of a wide feed-forward model in plain float32.

`model(**batch)` returns a dict with the loss; the loop steps an optimizer and a scheduler.
Nothing lets the matrix products use the tensor cores (no TF32, no autocast), so every GEMM runs
as an FP32 SIMT kernel at a fraction of the GPU's rate. The fix runs the forward pass under
bf16 autocast.
"""
import sys
import time

import torch
from torch import nn

FIXED = "--fixed" in sys.argv
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
WIDTH = 2048 if DEVICE == "cuda" else 128


class FeedForwardLM(nn.Module):
    def __init__(self, width: int, layers: int = 4, classes: int = 512):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(),
                                                  nn.Linear(4 * width, width)) for _ in range(layers))
        self.head = nn.Linear(width, classes)

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> dict:
        h = inputs
        for block in self.blocks:
            h = h + block(h)
        logits = self.head(h)
        return {"loss": nn.functional.cross_entropy(logits.float(), labels), "logits": logits}


def make_batches(n: int, tokens: int = 8192):
    for _ in range(n):
        yield {"inputs": torch.randn(tokens, WIDTH, device=DEVICE),
               "labels": torch.randint(0, 512, (tokens,), device=DEVICE)}


def train(steps: int = 80) -> float:
    model = FeedForwardLM(WIDTH).to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=steps)
    running = torch.zeros((), device=DEVICE)
    for batch in make_batches(steps):
        if FIXED:
            with torch.autocast(device_type=DEVICE, dtype=torch.bfloat16):
                outputs = model(**batch)
        else:
            outputs = model(**batch)  # PLANTED: float32 matmuls without tensor cores
        loss = outputs["loss"]
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        running += loss.detach()
    return float(running) / steps


if __name__ == "__main__":
    t0 = time.perf_counter()
    print("mean loss", round(train(), 4), "in", round(time.perf_counter() - t0, 2), "s")

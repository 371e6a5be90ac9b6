"""GPU: a bag-of-words document encoder in bfloat16 whose vocabulary size is odd.

Documents arrive as token counts over the tokenizer's vocabulary (50,257 entries, GPT-2's); the
encoder multiplies those [docs x vocab] rows by a [vocab x 2048] table. With an odd vocabulary
the rows are not 16-byte aligned, so cuBLAS cannot use its tensor-core kernels' fast loads. The
fix pads the vocabulary to a multiple of 64 (the extra columns are always zero).
"""
import sys
import time

import torch
from torch import nn

FIXED = "--fixed" in sys.argv
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOKENIZER_VOCAB = 50257
VOCAB = TOKENIZER_VOCAB
if FIXED:
    VOCAB = (TOKENIZER_VOCAB + 63) // 64 * 64


class BowEncoder(nn.Module):
    def __init__(self, vocab: int, width: int = 2048, classes: int = 20):
        super().__init__()
        self.embed = nn.Linear(vocab, width, bias=False)
        self.out = nn.Sequential(nn.ReLU(), nn.Linear(width, classes))

    def forward(self, counts: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(counts))  # PLANTED: [docs x 50257] @ [50257 x 2048] in bf16, unaligned


def documents(n_batches: int, docs: int = 4096):
    g = torch.Generator(device=DEVICE).manual_seed(0)
    for _ in range(n_batches):
        counts = torch.zeros(docs, VOCAB, device=DEVICE, dtype=torch.bfloat16)
        ids = torch.randint(0, TOKENIZER_VOCAB, (docs, 64), device=DEVICE, generator=g)
        counts.scatter_(1, ids, 1.0)
        yield counts, torch.randint(0, 20, (docs,), device=DEVICE, generator=g)


def train(n_batches: int = 1500) -> float:
    model = BowEncoder(VOCAB).to(DEVICE, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    total = torch.zeros((), device=DEVICE)
    for counts, labels in documents(n_batches):
        loss = nn.functional.cross_entropy(model(counts).float(), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        total += loss.detach()
    return float(total) / n_batches


if __name__ == "__main__":
    t0 = time.perf_counter()
    print("loss", round(train(), 4), "in", round(time.perf_counter() - t0, 2), "s")

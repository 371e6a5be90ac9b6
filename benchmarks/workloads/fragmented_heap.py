"""A corpus of 150,000 small tensors, half dropped after filtering, then batches scored from what
is left, no steps (~2-3 s bare): malloc's heap holds tens of thousands of free chunks, which makes
glibc's `mallinfo2` take tens of ms a call (the capture's memory probe reads the resident size
instead once it is slow: capture/plan.py `SLOW_MALLINFO_NS`)."""
import torch

torch.manual_seed(0)
docs = [torch.randn(int(n)) for n in torch.randint(10, 2000, (150_000,))]
docs = [d for i, d in enumerate(docs) if i % 2]  # filtered: every other one freed
w = torch.randn(64, 64)
total = 0.0
for start in range(0, len(docs), 64):
    batch = torch.stack([d[:64] if d.numel() >= 64 else torch.nn.functional.pad(d, (0, 64 - d.numel()))
                         for d in docs[start:start + 64]])
    for _ in range(6):
        batch = torch.tanh(batch @ w)
    total += float(batch.sum())
print(round(total, 3))

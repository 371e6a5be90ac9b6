"""A compiled encoder (the eager backend: no code generation) scores each query batch against a
corpus it encodes again for every batch: the same corpus tensor through the same weights."""
import torch

torch.manual_seed(0)
encoder = torch.compile(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)),
                        backend="eager")
corpus, queries = torch.randn(4096, 64), torch.randn(40, 16, 64)
with torch.no_grad():
    for batch in queries:
        q = encoder(batch)
        scores = q @ encoder(corpus).T  # PLANTED
        best = scores.argmax(1)
print("scored", len(queries), "batches")

"""Embed a document collection for a search index and save the embedding matrix.

Documents are streamed in batches through a feature hasher and a small two-tower-style encoder;
the L2-normalised embeddings of all documents are gathered into one (n_docs, 256) matrix.
"""
import argparse
import tempfile
from pathlib import Path

import torch
from torch import nn

FEATURES = 1024
DIM = 256


def document_batches(n_docs, batch_size, seed=0):
    """Bag-of-words count vectors of synthetic documents (what the feature hasher produces)."""
    g = torch.Generator().manual_seed(seed)
    for start in range(0, n_docs, batch_size):
        n = min(batch_size, n_docs - start)
        topic = torch.randint(0, 64, (n, 1), generator=g)
        words = (topic * 31 + torch.randint(0, 200, (n, 60), generator=g)) % FEATURES
        counts = torch.zeros(n, FEATURES).scatter_add_(1, words, torch.ones(n, 60))
        yield start, counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=50_000)
    ap.add_argument("--fixed", action="store_true", help="collect batches in a list, concatenate once")
    args = ap.parse_args()
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(FEATURES, 384), nn.GELU(), nn.Linear(384, DIM)).eval()
    all_emb = torch.empty(0, DIM)
    chunks = []
    with torch.inference_mode():
        for start, counts in document_batches(args.docs, 128):
            emb = nn.functional.normalize(encoder(torch.log1p(counts)), dim=1)
            if args.fixed:
                chunks.append(emb)
            else:
                all_emb = torch.cat([all_emb, emb])  # PLANTED
            if start % 12_800 == 0:
                print(f"{start} documents embedded")
    if args.fixed:
        all_emb = torch.cat(chunks)
    with tempfile.TemporaryDirectory() as tmp:
        torch.save(all_emb, Path(tmp) / "index.pt")
    print(f"index {tuple(all_emb.shape)}, mean similarity to doc 0: {(all_emb @ all_emb[0]).mean():.4f}")


if __name__ == "__main__":
    main()

"""Train a small 1D-CNN classifier on variable-length synthetic token sequences.

Expected H100 time: the CNN itself is tiny (B=256, T=128, d=128: ~50 GFLOP/step, <1 ms on TF32
cuDNN convs), so a step is ~100 small kernels and ~2-3 ms, launch-bound. Pooling each sequence
separately in a Python loop adds per sample a slice + mean in forward and ~6 kernels plus autograd bookkeeping in backward (select/slice
backward materialise a full (B,T,d) zero tensor each), ~50-60 us of host time per sample ->
~15 ms/step x 1000 steps + ~3 s startup ~= 18 s. The batched masked mean brings a step to
~2.5 ms (launch-bound CNN + foreach AdamW), i.e. ~2.5 s of training, ~5 s end to end.
"""
import argparse
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SMOKE = os.environ.get("SMOKE") == "1"
FIXED = False


class LengthMeanPool(nn.Module):
    """Mean over the valid (unpadded) positions of each sequence."""

    def forward(self, x, lengths, lengths_list):
        # x: (B, T, d); lengths: (B,) long on x.device; lengths_list: same values as python ints
        if FIXED:
            mask = (torch.arange(x.size(1), device=x.device)[None, :] < lengths[:, None]).to(x.dtype)
            return (x * mask.unsqueeze(-1)).sum(1) / lengths[:, None].to(x.dtype)
        return torch.stack([x[i, :n].mean(dim=0) for i, n in enumerate(lengths_list)])  # PLANTED


class TextCNN(nn.Module):
    def __init__(self, vocab, dim, n_classes, n_layers=3):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.convs = nn.ModuleList([nn.Conv1d(dim, dim, 5, padding=2) for _ in range(n_layers)])
        self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(n_layers)])
        self.pool = LengthMeanPool()
        self.head = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, n_classes))

    def forward(self, tokens, lengths, lengths_list):
        x = self.emb(tokens)                                  # (B, T, d)
        for conv, norm in zip(self.convs, self.norms):
            x = x + F.gelu(conv(norm(x).transpose(1, 2))).transpose(1, 2)
        return self.head(self.pool(x, lengths, lengths_list))


def make_dataset(n, seq_len, vocab, n_classes, device, seed):
    """Random tokens with class-specific keyword tokens sprinkled into the valid region."""
    rng = np.random.default_rng(seed)
    lengths_np = rng.integers(seq_len // 4, seq_len + 1, size=n)
    g = torch.Generator(device=device).manual_seed(seed)
    labels = torch.randint(0, n_classes, (n,), device=device, generator=g)
    tokens = torch.randint(100, vocab, (n, seq_len), device=device, generator=g)
    keywords = labels[:, None] * 8 + torch.randint(1, 9, (n, seq_len), device=device, generator=g)
    inject = torch.rand(n, seq_len, device=device, generator=g) < 0.08
    tokens = torch.where(inject, keywords, tokens)
    lengths = torch.from_numpy(lengths_np).to(device)
    tokens = tokens.masked_fill(torch.arange(seq_len, device=device)[None, :] >= lengths[:, None], 0)
    return tokens, lengths, lengths_np.tolist(), labels


def batches(data, batch_size):
    tokens, lengths, lengths_list, labels = data
    for s in range(0, tokens.size(0) - batch_size + 1, batch_size):
        yield tokens[s:s + batch_size], lengths[s:s + batch_size], lengths_list[s:s + batch_size], labels[s:s + batch_size]


def main():
    global FIXED
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()
    FIXED = args.fixed
    device = "cuda" if torch.cuda.is_available() else "cpu"

    vocab, n_classes, seq_len, dim = 8000, 12, 128, 128
    batch_size, epochs, n_train = (32, 2, 32 * 10) if SMOKE else (256, 5, 256 * 200)
    if SMOKE:
        seq_len, dim = 48, 64
    train = make_dataset(n_train, seq_len, vocab, n_classes, device, seed=0)
    val = make_dataset(batch_size * (4 if SMOKE else 20), seq_len, vocab, n_classes, device, seed=1)

    torch.manual_seed(0)
    model = TextCNN(vocab, dim, n_classes).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    print(f"device={device} params={sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")

    t0 = time.time()
    step = 0
    for epoch in range(epochs):
        model.train()
        loss_sum = torch.zeros((), device=device)
        n_steps = 0
        for tokens, lengths, lengths_list, labels in batches(train, batch_size):
            logits = model(tokens, lengths, lengths_list)
            loss = F.cross_entropy(logits, labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.detach()
            n_steps += 1
            step += 1

        model.eval()
        correct = torch.zeros((), device=device, dtype=torch.long)
        with torch.no_grad():
            for tokens, lengths, lengths_list, labels in batches(val, batch_size):
                correct += (model(tokens, lengths, lengths_list).argmax(-1) == labels).sum()
        acc = correct.item() / val[0].size(0)
        print(f"epoch {epoch}  train_loss {(loss_sum / n_steps).item():.4f}  val_acc {acc:.4f}")

    elapsed = time.time() - t0
    print(f"{step} steps in {elapsed:.2f}s  ({step * batch_size / elapsed:,.0f} seq/s)")


if __name__ == "__main__":
    main()

"""Held-out evaluation of a small GRU language model.

Sequences are grouped into length-sorted batches (pad to the longest in each
batch), and a compiled metrics function computes label-smoothed focal loss,
predictive entropy, accuracy and mean confidence per batch.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 2000
PAD = 0


class TinyGRULM(nn.Module):
    def __init__(self, vocab=VOCAB, dim=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=PAD)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, ids):
        h, _ = self.rnn(self.embed(ids))
        return self.lm_head(self.norm(h))


def token_metrics(logits, targets, mask, gamma: float = 2.0, smoothing: float = 0.1, temperature: float = 1.5):
    logp = torch.log_softmax(logits.float(), dim=-1)
    probs = logp.exp()
    vocab = logits.shape[-1]
    onehot = F.one_hot(targets, vocab).to(logp.dtype)
    soft_targets = onehot * (1 - smoothing) + smoothing / vocab
    focal = (1 - probs).pow(gamma)
    loss = -(soft_targets * focal * logp).sum(-1)
    entropy = -(probs * logp).sum(-1)
    brier = (probs - onehot).pow(2).sum(-1)
    scaled_nll = -(onehot * torch.log_softmax(logits.float() / temperature, dim=-1)).sum(-1)
    confidence, predicted = probs.max(-1)
    correct = (predicted == targets).to(logp.dtype)
    m = mask.to(logp.dtype)
    denom = m.sum()
    return torch.stack([(loss * m).sum(), (entropy * m).sum(), (brier * m).sum(), (scaled_nll * m).sum(), (correct * m).sum(), (confidence * m).sum()]) / denom, denom


def synthetic_corpus(n_seqs, min_len, max_len, gen):
    """Markov-ish token streams so the model has something learnable-looking."""
    lengths = torch.randint(min_len, max_len + 1, (n_seqs,), generator=gen)
    transition = torch.randint(1, VOCAB, (VOCAB,), generator=gen)
    seqs = []
    for n in lengths.tolist():
        start = torch.randint(1, VOCAB, (1,), generator=gen)
        noise = torch.randint(1, VOCAB, (n,), generator=gen)
        keep = torch.rand(n, generator=gen) < 0.7
        seq = torch.empty(n, dtype=torch.long)
        seq[0] = start
        seq[1:] = torch.where(keep[1:], transition[noise[:-1]], noise[1:])
        seqs.append(seq)
    return seqs


def length_bucketed_batches(seqs, batch_size, gen):
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    chunks = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    for j in torch.randperm(len(chunks), generator=gen).tolist():
        batch = [seqs[i] for i in chunks[j]]
        padded = nn.utils.rnn.pad_sequence(batch, batch_first=True, padding_value=PAD)
        yield padded[:, :-1], padded[:, 1:], padded[:, 1:].ne(PAD)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--seqs", type=int, default=2600)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(7)
    model = TinyGRULM().eval()
    corpus = synthetic_corpus(args.seqs, 16, 160, gen)

    if args.fixed:
        metrics_fn = torch.compile(token_metrics)
    else:
        metrics_fn = torch.compile(token_metrics, dynamic=False)  # PLANTED

    totals = torch.zeros(6, dtype=torch.float64)
    n_tokens = 0.0
    t0 = time.perf_counter()
    with torch.inference_mode():
        for inputs, targets, mask in length_bucketed_batches(corpus, args.batch_size, gen):
            logits = model(inputs)
            batch_metrics, count = metrics_fn(logits, targets, mask)
            totals += batch_metrics.double() * count.item()
            n_tokens += count.item()
    elapsed = time.perf_counter() - t0

    loss, entropy, brier, scaled_nll, acc, conf = (totals / n_tokens).tolist()
    print(f"evaluated {int(n_tokens)} tokens in {elapsed:.2f}s")
    print(f"focal-smoothed loss {loss:.5f}  entropy {entropy:.5f}  brier {brier:.5f}  nll@T {scaled_nll:.5f}  acc {acc:.5f}  conf {conf:.5f}")


if __name__ == "__main__":
    main()

"""A compiled word-level recurrent language model trained on sentences bucketed by length.

The model steps its GRU cell in a Python loop over time, so dynamo unrolls the loop and the
graph is specialised to the sequence length. Bucketing sentences by length (to save padding)
gives every bucket a new length, and every new length compiles the model again (until the
recompile limit, after which new lengths run uncompiled). --fixed pads every batch to the
longest length, so one graph serves all batches; the loss ignores padding, so the numbers
are the same."""

from __future__ import annotations

import argparse
import random

import torch
import torch.nn.functional as F

MAX_WORDS = 10
PAD, EOS = 0, 1


class WordRNN(torch.nn.Module):
    def __init__(self, vocab: int, dim: int = 64):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim, padding_idx=PAD)
        self.cell = torch.nn.GRUCell(dim, dim)
        self.out = torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        h = x.new_zeros(tokens.shape[0], self.cell.hidden_size)
        outputs = []
        for t in range(tokens.shape[1]):
            h = self.cell(x[:, t], h)
            outputs.append(h)
        return self.out(torch.stack(outputs, 1))


def sentences(n: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    nouns, verbs = ["cat", "dog", "bird", "fish", "child", "robot"], ["sees", "likes", "follows", "finds"]
    adjs = ["small", "red", "quick", "old", "happy"]
    out = []
    for _ in range(n):
        words = ["the", rng.choice(adjs), rng.choice(nouns), rng.choice(verbs)]
        while len(words) < MAX_WORDS and rng.random() < 0.8:
            words.append(rng.choice(["and", "the", "a"] + adjs + nouns))
        out.append(words[:MAX_WORDS])
    return out


def bucketed_batches(corpus: list[list[int]], batch_size: int, pad_to: int | None):
    """Batches of sentences of similar length, each padded to its own longest sentence."""
    ordered = sorted(corpus, key=len)
    for start in range(0, len(ordered), batch_size):
        chunk = ordered[start:start + batch_size]
        width = pad_to or max(len(s) for s in chunk)  # PLANTED
        ids = torch.full((len(chunk), width), PAD)
        for row, sent in enumerate(chunk):
            ids[row, :len(sent)] = torch.tensor(sent)
        yield ids


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--fixed", action="store_true", help="pad every batch to the longest sentence length")
    args = ap.parse_args()
    torch.manual_seed(0)
    texts = sentences(2048)
    vocab = {w: i + 2 for i, w in enumerate(sorted({w for s in texts for w in s}))}
    corpus = [[vocab[w] for w in s] + [EOS] for s in texts]
    model = WordRNN(len(vocab) + 2)
    compiled = torch.compile(model, backend="aot_eager")
    opt = torch.optim.Adam(model.parameters(), lr=3e-3, foreach=True)
    for epoch in range(args.epochs):
        total, batches = 0.0, 0
        for ids in bucketed_batches(corpus, 64, MAX_WORDS + 1 if args.fixed else None):
            logits = compiled(ids[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(), ignore_index=PAD)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total, batches = total + loss.item(), batches + 1
        print(f"epoch {epoch}: loss {total / batches:.4f}")


if __name__ == "__main__":
    main()

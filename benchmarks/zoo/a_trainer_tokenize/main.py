"""Sentiment classification of reviews with a Trainer class; the dataset tokenizes on the fly.

    python main.py [--epochs 8] [--fixed]

--fixed tokenizes every review once when the dataset is built instead of on each access."""

from __future__ import annotations

import argparse

import torch
from corpus import make_reviews
from data import ReviewDataset
from tokenizer import WordPieceTokenizer
from trainer import History, PrintProgress, Trainer


class BagOfPieces(torch.nn.Module):
    def __init__(self, vocab_size: int, dim: int = 64, classes: int = 2):
        super().__init__()
        self.embed = torch.nn.EmbeddingBag(vocab_size, dim, mode="mean", padding_idx=0)
        self.head = torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.ReLU(), torch.nn.Linear(dim, classes))

    def forward(self, ids):
        return self.head(self.embed(ids))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--fixed", action="store_true", help="tokenize once, when the dataset is built")
    args = ap.parse_args()
    torch.manual_seed(0)
    reviews = make_reviews(1000, length=(150, 300))
    tokenizer = WordPieceTokenizer.train([text for text, _ in reviews[:300]], max_len=320)
    train_set = ReviewDataset(reviews[:800], tokenizer, pretokenize=args.fixed)
    val_set = ReviewDataset(reviews[800:], tokenizer, pretokenize=args.fixed)
    history = History()
    trainer = Trainer(BagOfPieces(len(tokenizer.vocab)), callbacks=[history, PrintProgress()])
    trainer.fit(train_set, val_set, epochs=args.epochs)
    print(f"final val_acc {history.rows[-1]['val_acc']:.3f}")


if __name__ == "__main__":
    main()

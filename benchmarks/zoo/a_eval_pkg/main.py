"""Fine-tune a small text classifier briefly, then evaluate it on a large labelled set.

    python main.py [--fixed]

Trainer.evaluate runs under torch.inference_mode(False), that is with autograd on, so the
encoder cannot take its fast path (which skips the padding of short sentences).
--fixed evaluates under inference_mode."""

from __future__ import annotations

import argparse

import torch
from model import TextClassifier
from trainer import Trainer


def labelled_sentences(n: int, vocab: int, seed: int = 0) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Sentences of skewed lengths (most short, a few long); the class shifts the token ids."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (n,), generator=g)
    lengths = (6 + torch.empty(n).exponential_(1 / 12, generator=g)).clamp(max=256).long()
    seqs = [(torch.randint(1, vocab // 4, (int(k),), generator=g) + int(y) * (vocab // 4)).clamp(1, vocab - 1)
            for k, y in zip(lengths, labels)]
    return seqs, labels


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true", help="evaluate under inference_mode")
    args = ap.parse_args()
    torch.manual_seed(0)
    vocab = 8000
    train_seqs, train_labels = labelled_sentences(512, vocab, seed=0)
    eval_seqs, eval_labels = labelled_sentences(768, vocab, seed=1)
    trainer = Trainer(TextClassifier(vocab), no_grad_eval=args.fixed)
    trainer.fit(train_seqs, train_labels, steps=3)
    print(trainer.evaluate(eval_seqs, eval_labels))


if __name__ == "__main__":
    main()

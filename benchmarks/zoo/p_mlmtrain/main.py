"""Pre-train a tiny BERT on a synthetic corpus.

    python main.py [--max-steps N]
"""
import argparse

import torch

from data import DataCollatorForMLM, SyntheticCorpus
from engine import Trainer, TrainingArguments
from model import BertForMaskedLM, ModelConfig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-steps", type=int, default=10)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--fixed", action="store_true")
    cli = ap.parse_args()

    torch.manual_seed(0)
    mcfg = ModelConfig()
    args = TrainingArguments(per_device_train_batch_size=16, max_steps=cli.max_steps,
                             logging_steps=5, eval_steps=cli.max_steps)

    train_ds = SyntheticCorpus(n_docs=4096, seq_len=cli.seq_len, vocab_size=mcfg.vocab_size, seed=1)
    eval_ds = SyntheticCorpus(n_docs=128, seq_len=cli.seq_len, vocab_size=mcfg.vocab_size, seed=2)
    collator = DataCollatorForMLM(vocab_size=mcfg.vocab_size, seed=3)

    model = BertForMaskedLM(mcfg)
    print(f"params: {model.num_parameters() / 1e6:.2f}M")
    trainer = Trainer(model, args, train_ds, eval_ds, collator)
    trainer.train()
    with torch.no_grad():
        checksum = sum(p.double().abs().sum() for p in model.parameters())
    print(f"param checksum: {float(checksum):.4f}")


if __name__ == "__main__":
    main()

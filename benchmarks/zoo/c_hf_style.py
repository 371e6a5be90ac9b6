"""Hugging-Face-style fine-tuning loop: a tokenized dataset of dicts, a collator that
pads and builds attention masks, and a small transformer classifier whose forward
takes **batch and returns a dict with .loss / .logits."""
import argparse
import random
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

VOCAB, PAD_ID, CLS_ID = 8000, 0, 1
MAX_LENGTH = 256   # tokenizer model_max_length


class ToyTokenizedDataset(Dataset):
    """Sentiment-like task: label = whether 'positive' token ids outnumber 'negative' ones."""

    def __init__(self, n, seed):
        rnd = random.Random(seed)
        self.examples = []
        for _ in range(n):
            L = rnd.randint(12, 60)
            ids = [CLS_ID] + [rnd.randrange(2, VOCAB) for _ in range(L)]
            pos = sum(1 for t in ids if 2 <= t < 400)
            neg = sum(1 for t in ids if 400 <= t < 800)
            self.examples.append({"input_ids": ids, "labels": int(pos >= neg)})

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, i):
        return self.examples[i]


class DataCollatorWithPadding:
    def __init__(self, pad_to_max_length):
        self.pad_to_max_length = pad_to_max_length

    def __call__(self, features):
        longest = max(len(f["input_ids"]) for f in features)
        pad_len = MAX_LENGTH if self.pad_to_max_length else longest  # PLANTED
        ids = torch.full((len(features), pad_len), PAD_ID, dtype=torch.long)
        mask = torch.zeros((len(features), pad_len), dtype=torch.long)
        for i, f in enumerate(features):
            n = len(f["input_ids"])
            ids[i, :n] = torch.tensor(f["input_ids"])
            mask[i, :n] = 1
        return {"input_ids": ids, "attention_mask": mask,
                "labels": torch.tensor([f["labels"] for f in features])}


class ModelOutput(dict):
    __getattr__ = dict.__getitem__


class TinyEncoderForSequenceClassification(nn.Module):
    def __init__(self, d_model=64, n_layers=2, n_heads=4, num_labels=2):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d_model, padding_idx=PAD_ID)
        self.pos = nn.Embedding(MAX_LENGTH, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.1,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.classifier = nn.Linear(d_model, num_labels)

    def forward(self, input_ids, attention_mask, labels=None):
        pos = torch.arange(input_ids.shape[1])
        h = self.tok(input_ids) + self.pos(pos)[None]
        h = self.encoder(h, src_key_padding_mask=attention_mask == 0)
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1)
        logits = self.classifier(pooled)
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return ModelOutput(loss=loss, logits=logits)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--epochs", type=int, default=1)
    args = ap.parse_args()
    torch.manual_seed(0)
    train_ds = ToyTokenizedDataset(768, seed=1)
    collator = DataCollatorWithPadding(pad_to_max_length=not args.fixed)
    loader = DataLoader(train_ds, batch_size=16, shuffle=True, collate_fn=collator,
                        generator=torch.Generator().manual_seed(0))
    model = TinyEncoderForSequenceClassification()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    t0 = time.time()
    for epoch in range(args.epochs):
        model.train()
        for step, batch in enumerate(loader):
            outputs = model(**batch)
            outputs.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
            if step % 5 == 0:
                acc = (outputs.logits.argmax(-1) == batch["labels"]).float().mean().item()
                print(f"epoch {epoch} step {step} loss {outputs.loss.item():.4f} acc {acc:.2f}")
    print(f"trained in {time.time() - t0:.2f}s")


if __name__ == "__main__":
    main()

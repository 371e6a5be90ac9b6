"""Fine-tuning in the style of the NLP libraries' example scripts, written well: the corpus is
tokenized once, model(**batch) returns a dict with the loss, gradient accumulation, a warm-up
then linear-decay schedule, fused AdamW, gradients set to None, evaluation under
inference_mode. A clean program: nothing planted."""

from __future__ import annotations

import argparse
import random

import torch
import torch.nn.functional as F


class Classifier(torch.nn.Module):
    def __init__(self, vocab: int, dim: int = 128, layers: int = 2, labels: int = 3, max_len: int = 64):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, dim, padding_idx=0)
        self.positions = torch.nn.Embedding(max_len, dim)
        layer = torch.nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.1, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.classifier = torch.nn.Linear(dim, labels)

    def forward(self, input_ids, attention_mask, labels=None) -> dict:
        x = self.tokens(input_ids) + self.positions(torch.arange(input_ids.shape[1]))
        h = self.encoder(x, src_key_padding_mask=~attention_mask)
        pooled = (h * attention_mask[..., None]).sum(1) / attention_mask.sum(1, keepdim=True)
        logits = self.classifier(pooled)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits, labels)
        return out


def corpus(n: int, seed: int = 0) -> list[tuple[list[str], int]]:
    rng = random.Random(seed)
    topics = [["goal", "match", "team", "score"], ["market", "stock", "price", "bank"], ["planet", "orbit", "star"]]
    filler = [f"w{i}" for i in range(2000)]
    out = []
    for _ in range(n):
        label = rng.randrange(3)
        words = rng.choices(filler, k=rng.randint(10, 50)) + rng.choices(topics[label], k=3)
        rng.shuffle(words)
        out.append((words, label))
    return out


def tokenize(data: list[tuple[list[str], int]], vocab: dict[str, int], max_len: int) -> dict:
    ids = torch.zeros(len(data), max_len, dtype=torch.long)
    for row, (words, _) in enumerate(data):
        toks = [vocab.get(w, 1) for w in words][:max_len]
        ids[row, :len(toks)] = torch.tensor(toks)
    return {"input_ids": ids, "attention_mask": ids != 0, "labels": torch.tensor([y for _, y in data])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch_size", type=int, default=32)
    ap.add_argument("--gradient_accumulation_steps", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(0)
    data = corpus(1800)
    vocab = {w: i + 2 for i, w in enumerate(sorted({w for words, _ in data for w in words}))}
    train, test = tokenize(data[:1500], vocab, 64), tokenize(data[1500:], vocab, 64)
    model = Classifier(len(vocab) + 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01, fused=True)
    updates = len(train["labels"]) // (args.batch_size * args.gradient_accumulation_steps) * args.epochs
    warmup = updates // 10
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: s / max(1, warmup) if s < warmup else max(0.0, (updates - s) / (updates - warmup)))
    g = torch.Generator().manual_seed(0)
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(train["labels"]), generator=g)
        for micro, start in enumerate(range(0, len(order), args.batch_size)):
            batch = {k: v[order[start:start + args.batch_size]] for k, v in train.items()}
            outputs = model(**batch)
            (outputs["loss"] / args.gradient_accumulation_steps).backward()
            if (micro + 1) % args.gradient_accumulation_steps == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
        print(f"epoch {epoch}: last loss {outputs['loss'].item():.4f}")
    model.eval()
    with torch.inference_mode():
        logits = model(test["input_ids"], test["attention_mask"])["logits"]
    print(f"test accuracy {(logits.argmax(1) == test['labels']).float().mean().item():.3f}")


if __name__ == "__main__":
    main()

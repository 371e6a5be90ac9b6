"""Fine-tune a small transformer classifier, Hugging-Face style.

A toy word-level tokenizer mimics the `tokenizer(texts, padding=..., ...)`
call signature; batches are produced by a DataLoader with a collate function.
Data is synthetic sentiment-like text generated on the fly.
"""
import argparse
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--fixed", action="store_true")
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

random.seed(0)
torch.manual_seed(0)

POS = ["great", "excellent", "lovely", "superb", "enjoyable", "fantastic", "brilliant"]
NEG = ["awful", "boring", "terrible", "dull", "poor", "horrible", "mediocre"]
FILLER = [f"w{i}" for i in range(400)]


def make_corpus(n):
    texts, labels = [], []
    for _ in range(n):
        y = random.randint(0, 1)
        length = random.randint(4, 24)
        words = random.choices(FILLER, k=length)
        for _ in range(random.randint(1, 3)):
            words[random.randrange(length)] = random.choice(POS if y else NEG)
        texts.append(" ".join(words))
        labels.append(y)
    return texts, labels


class WordTokenizer:
    def __init__(self, vocab_words, model_max_length=128):
        self.pad_token_id, self.cls_token_id, self.unk_token_id = 0, 1, 2
        self.vocab = {w: i + 3 for i, w in enumerate(vocab_words)}
        self.model_max_length = model_max_length

    def __len__(self):
        return len(self.vocab) + 3

    def encode(self, text):
        return [self.cls_token_id] + [self.vocab.get(w, self.unk_token_id) for w in text.split()]

    def __call__(self, texts, padding="longest", max_length=None, truncation=True):
        max_length = max_length or self.model_max_length
        ids = [self.encode(t) for t in texts]
        if truncation:
            ids = [x[:max_length] for x in ids]
        target = max_length if padding == "max_length" else max(len(x) for x in ids)
        input_ids = torch.full((len(ids), target), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(ids), target), dtype=torch.long)
        for i, x in enumerate(ids):
            input_ids[i, : len(x)] = torch.tensor(x)
            attention_mask[i, : len(x)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class TextDataset(Dataset):
    def __init__(self, texts, labels):
        self.texts, self.labels = texts, labels

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        return {"text": self.texts[i], "label": self.labels[i]}


class DataCollator:
    def __init__(self, tokenizer, padding):
        self.tokenizer = tokenizer
        self.padding = padding

    def __call__(self, features):
        texts = [f["text"] for f in features]
        batch = self.tokenizer(texts, padding=self.padding, max_length=self.tokenizer.model_max_length)
        batch["labels"] = torch.tensor([f["label"] for f in features])
        return batch


class TinyEncoderForSequenceClassification(nn.Module):
    def __init__(self, vocab_size, d_model=64, n_heads=4, n_layers=2, max_pos=128, num_labels=2):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.pos = nn.Embedding(max_pos, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.1,
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.classifier = nn.Linear(d_model, num_labels)

    def forward(self, input_ids, attention_mask, labels=None):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        h = self.embed(input_ids) + self.pos(pos)[None]
        h = self.encoder(h, src_key_padding_mask=attention_mask == 0)
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1.0)
        logits = self.classifier(pooled)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


def get_linear_schedule_with_warmup(opt, warmup, total):
    def f(step):
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))
    return torch.optim.lr_scheduler.LambdaLR(opt, f)


def main():
    train_texts, train_labels = make_corpus(640)
    eval_texts, eval_labels = make_corpus(256)
    tokenizer = WordTokenizer(FILLER + POS + NEG, model_max_length=128)
    collator = DataCollator(tokenizer, padding="longest" if args.fixed else "max_length")  # PLANTED
    train_dl = DataLoader(TextDataset(train_texts, train_labels), batch_size=32, shuffle=True,
                          collate_fn=collator)
    eval_dl = DataLoader(TextDataset(eval_texts, eval_labels), batch_size=64, collate_fn=collator)

    model = TinyEncoderForSequenceClassification(len(tokenizer))
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
    total = args.epochs * len(train_dl)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup=total // 10, total=total)

    t0 = time.time()
    step = 0
    for epoch in range(args.epochs):
        model.train()
        running = 0.0
        for batch in train_dl:
            out = model(**batch)
            out["loss"].backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            running += out["loss"].detach()
            step += 1
        model.eval()
        correct = 0
        with torch.no_grad():
            for batch in eval_dl:
                logits = model(batch["input_ids"], batch["attention_mask"])["logits"]
                correct += (logits.argmax(-1) == batch["labels"]).sum().item()
        print(f"epoch {epoch} train_loss {running.item() / len(train_dl):.4f} "
              f"eval_acc {correct / len(eval_texts):.3f}")
    print(f"steps {step} time {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()

"""Tokenize synthetic product reviews, fine-tune a tiny transformer
classifier, then run a streaming batch-inference job that writes
predictions to a TSV file."""
import argparse
import os
import re
import tempfile
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--fixed", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
gen = torch.Generator().manual_seed(0)

POSITIVE = ["great", "love", "excellent", "perfect", "happy", "recommend", "sturdy"]
NEGATIVE = ["broke", "awful", "refund", "cheap", "disappointed", "return", "flimsy"]
FILLER = [f"w{i}" for i in range(400)]


def synth_review(label):
    n = int(torch.randint(6, 48, (1,), generator=gen))
    words = [FILLER[int(i)] for i in torch.randint(0, len(FILLER), (n,), generator=gen)]
    cue = POSITIVE if label == 1 else NEGATIVE
    for _ in range(int(torch.randint(1, 4, (1,), generator=gen))):
        words.insert(int(torch.randint(0, len(words) + 1, (1,), generator=gen)),
                     cue[int(torch.randint(0, len(cue), (1,), generator=gen))])
    return " ".join(words).capitalize() + "."


class WordTokenizer:
    PAD, UNK, CLS = "[PAD]", "[UNK]", "[CLS]"

    def __init__(self, model_max_length=256):
        self.model_max_length = model_max_length
        self.vocab = {self.PAD: 0, self.UNK: 1, self.CLS: 2}

    def split(self, text):
        return re.findall(r"[a-z0-9]+", text.lower())

    def fit(self, texts, min_freq=1):
        counts = Counter(tok for t in texts for tok in self.split(t))
        for tok, c in counts.most_common():
            if c >= min_freq:
                self.vocab.setdefault(tok, len(self.vocab))
        return self

    def encode(self, text):
        ids = [self.vocab[self.CLS]] + [self.vocab.get(t, 1) for t in self.split(text)]
        return ids[: self.model_max_length]

    def __call__(self, texts, padding="longest"):
        encoded = [self.encode(t) for t in texts]
        target = self.model_max_length if padding == "max_length" else max(map(len, encoded))
        input_ids = torch.zeros(len(texts), target, dtype=torch.long)
        for row, ids in enumerate(encoded):
            input_ids[row, : len(ids)] = torch.tensor(ids)
        return input_ids, input_ids != 0


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.ln2(x))


class ReviewClassifier(nn.Module):
    def __init__(self, vocab_size, max_len, dim=64, heads=4, layers=2, n_classes=2):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, dim, padding_idx=0)
        self.pos_emb = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.head = nn.Linear(dim, n_classes)

    def forward(self, input_ids, mask):
        pos = torch.arange(input_ids.shape[1])
        x = self.tok_emb(input_ids) + self.pos_emb(pos)
        for blk in self.blocks:
            x = blk(x, mask)
        m = mask.unsqueeze(-1).float()
        pooled = (x * m).sum(1) / m.sum(1)
        return self.head(pooled)


def batched(items, size):
    for i in range(0, len(items), size):
        yield items[i: i + size]


def encoded_batches(texts, tokenizer, batch_size):
    padding = "longest" if args.fixed else "max_length"  # PLANTED
    for chunk in batched(texts, batch_size):
        yield chunk, *tokenizer(chunk, padding=padding)


def train(model, tokenizer, texts, labels, epochs=2, batch_size=32):
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    label_t = torch.tensor(labels)
    for epoch in range(epochs):
        model.train()
        total = 0.0
        for step, (_, ids, mask) in enumerate(encoded_batches(texts, tokenizer, batch_size)):
            y = label_t[step * batch_size: (step + 1) * batch_size]
            loss = F.cross_entropy(model(ids, mask), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch}: loss={total / (step + 1):.4f}")


@torch.inference_mode()
def predict_to_file(model, tokenizer, texts, path, batch_size=128):
    model.eval()
    n_pos = 0
    with open(path, "w") as fh:
        for chunk, ids, mask in encoded_batches(texts, tokenizer, batch_size):
            probs = model(ids, mask).softmax(-1)
            for text, p in zip(chunk, probs[:, 1].tolist()):
                fh.write(f"{p:.4f}\t{int(p > 0.5)}\t{text}\n")
                n_pos += p > 0.5
    return n_pos


def main():
    train_labels = [int(i % 2) for i in range(450)]
    train_texts = [synth_review(l) for l in train_labels]
    infer_labels = [int(torch.randint(0, 2, (1,), generator=gen)) for _ in range(800)]
    infer_texts = [synth_review(l) for l in infer_labels]

    tokenizer = WordTokenizer(model_max_length=256).fit(train_texts)
    model = ReviewClassifier(len(tokenizer.vocab), tokenizer.model_max_length)
    train(model, tokenizer, train_texts, train_labels)

    out_path = os.path.join(tempfile.gettempdir(), f"review_preds_{os.getpid()}.tsv")
    n_pos = predict_to_file(model, tokenizer, infer_texts, out_path)
    with open(out_path) as fh:
        preds = [int(line.split("\t")[1]) for line in fh]
    os.remove(out_path)
    acc = sum(int(p == l) for p, l in zip(preds, infer_labels)) / len(preds)
    print(f"wrote {len(preds)} predictions, {n_pos} positive, accuracy={acc:.4f}")


if __name__ == "__main__":
    main()

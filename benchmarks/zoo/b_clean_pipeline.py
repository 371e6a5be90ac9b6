"""Train a byte-level CNN language-identification model on text streamed through generator stages.

read_lines -> encode (bytes, vectorised) -> bucket-and-batch (similar lengths together) -> train.
A well-written pipeline: each stage is cheap next to the model, tensors are float32 throughout.
"""
import argparse
import random

import numpy as np
import torch
from torch import nn

LANGS = {
    "en": "the of and to in is that it was for on are with as his they be at one have this from",
    "de": "der die und in den von zu das mit sich des auf für ist im dem nicht ein eine als auch",
    "fr": "de la le et les des en un du une que est pour qui dans par plus pas au sur ne se",
    "es": "de la que el en y a los se del las un por con no una su para es al lo como más",
    "it": "di e il la che in a per un del non sono le con si da una gli al della anche",
    "nl": "de en van het een in is dat op te zijn met voor niet die aan er maar om ook als",
}
MAX_LEN = 256


def read_lines(n, seed=0):
    rng = random.Random(seed)
    vocab = {k: v.split() for k, v in LANGS.items()}
    langs = sorted(vocab)
    for _ in range(n):
        label = rng.randrange(len(langs))
        words = rng.choices(vocab[langs[label]], k=rng.randint(5, 40))
        yield " ".join(words), label


def encode(lines):
    for text, label in lines:
        yield np.frombuffer(text.encode("utf-8")[:MAX_LEN], dtype=np.uint8), label


def bucket_batches(samples, batch_size, pool=32):
    """Sort a pool of samples by length so each batch pads little, then yield padded batches."""
    buf = []
    for s in samples:
        buf.append(s)
        if len(buf) == batch_size * pool:
            yield from _emit(buf, batch_size)
            buf = []
    yield from _emit(buf, batch_size)


def _emit(buf, batch_size):
    buf.sort(key=lambda s: len(s[0]))
    for i in range(0, len(buf), batch_size):
        chunk = buf[i:i + batch_size]
        width = max(len(b) for b, _ in chunk)
        ids = np.zeros((len(chunk), width), dtype=np.int64)
        for row, (b, _) in enumerate(chunk):
            ids[row, :len(b)] = b
        yield torch.from_numpy(ids), torch.tensor([lab for _, lab in chunk])


class ByteCNN(nn.Module):
    def __init__(self, n_classes, d=32):
        super().__init__()
        self.emb = nn.Embedding(256, d, padding_idx=0)
        self.convs = nn.Sequential(nn.Conv1d(d, 64, 5, padding=2), nn.ReLU(), nn.Conv1d(64, 64, 3, padding=1),
                                   nn.ReLU())
        self.out = nn.Linear(64, n_classes)

    def forward(self, ids):
        h = self.convs(self.emb(ids).transpose(1, 2))
        return self.out(h.amax(dim=2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=10_000)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = ByteCNN(len(LANGS))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step, (ids, labels) in enumerate(bucket_batches(encode(read_lines(args.lines)), 64)):
        logits = model(ids)
        loss = nn.functional.cross_entropy(logits, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 40 == 0:
            acc = (logits.argmax(1) == labels).float().mean().item()
            print(f"step {step} loss {loss.item():.3f} acc {acc:.3f}")


if __name__ == "__main__":
    main()

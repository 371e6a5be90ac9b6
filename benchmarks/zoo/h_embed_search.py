"""Offline semantic-search indexing job: stream docs -> tokenize -> embed -> top-k search."""
import argparse
import random
import time
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_LEN = 512          # model's positional limit
EMB_BUCKETS = 8192
WORDS = [w + s for w in ("data", "model", "train", "graph", "query", "token", "vector",
                         "layer", "batch", "cache", "index", "score", "merge", "shard")
         for s in ("", "s", "ed", "ing", "er", "ize", "ion", "al", "ly", "ness")]


class HashingTokenizer:
    """Hashing-trick tokenizer: word + word-bigram ids, no vocab file needed."""

    def __init__(self, buckets=EMB_BUCKETS, max_len=MAX_LEN):
        self.buckets = buckets
        self.max_len = max_len
        self.cls_id, self.pad_id = 1, 0

    def _h(self, s):
        return 2 + zlib.crc32(s.encode()) % (self.buckets - 2)

    def encode(self, text):
        words = text.lower().split()
        ids = [self.cls_id] + [self._h(w) for w in words]
        ids += [self._h(a + "_" + b) for a, b in zip(words, words[1:])]
        return ids[: self.max_len]

    def pad_batch(self, seqs, pad_to_model_max=True):
        width = self.max_len if pad_to_model_max else max(len(s) for s in seqs)  # PLANTED
        ids = torch.full((len(seqs), width), self.pad_id, dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s)
        return ids, ids != self.pad_id


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, x, mask):
        B, T, D = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / (D // self.heads) ** 0.5
        att = att.masked_fill(~mask[:, None, None, :], float("-inf")).softmax(-1)
        x = x + self.out((att @ v).transpose(1, 2).reshape(B, T, D))
        return x + self.ff(self.ln2(x))


class SentenceEncoder(nn.Module):
    def __init__(self, d=128, heads=4, layers=2):
        super().__init__()
        self.emb = nn.Embedding(EMB_BUCKETS, d, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(MAX_LEN, d) * 0.02)
        self.layers = nn.ModuleList(EncoderLayer(d, heads, 4 * d) for _ in range(layers))

    def forward(self, ids, mask):
        x = self.emb(ids) + self.pos[: ids.shape[1]]
        for layer in self.layers:
            x = layer(x, mask)
        m = mask.unsqueeze(-1).float()
        return F.normalize((x * m).sum(1) / m.sum(1), dim=-1)


def stream_documents(n, seed):
    rng = random.Random(seed)
    for doc_id in range(n):
        length = rng.randint(8, 40)
        yield doc_id, " ".join(rng.choice(WORDS) for _ in range(length))


def corrupt(text, rng, drop=0.25):
    words = [w for w in text.split() if rng.random() > drop]
    return " ".join(words or text.split()[:1])


def batched(iterable, size):
    batch = []
    for item in iterable:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def embed_stream(batches, tokenizer, encoder, pad_to_model_max):
    for batch in batches:
        ids_list = [tokenizer.encode(text) for _, text in batch]
        ids, mask = tokenizer.pad_batch(ids_list, pad_to_model_max)
        with torch.inference_mode():
            vecs = encoder(ids, mask)
        yield [doc_id for doc_id, _ in batch], vecs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--queries", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(0)
    tokenizer = HashingTokenizer()
    encoder = SentenceEncoder().eval()
    pad_full = not args.fixed

    t0 = time.time()
    ids, chunks = [], []
    for doc_ids, vecs in embed_stream(batched(stream_documents(args.docs, 1), args.batch),
                                      tokenizer, encoder, pad_full):
        ids.extend(doc_ids)
        chunks.append(vecs)
    index = torch.cat(chunks)
    print(f"indexed {index.shape[0]} docs, dim {index.shape[1]} in {time.time() - t0:.1f}s")

    rng = random.Random(7)
    docs = dict(stream_documents(args.docs, 1))
    targets = rng.sample(range(args.docs), args.queries)
    queries = ((t, corrupt(docs[t], rng)) for t in targets)
    hits1 = hits5 = 0
    for q_ids, q_vecs in embed_stream(batched(queries, args.batch), tokenizer, encoder, pad_full):
        top = (q_vecs @ index.T).topk(5, dim=-1).indices
        for target, row in zip(q_ids, top.tolist()):
            found = [ids[j] for j in row]
            hits1 += found[0] == target
            hits5 += target in found
    print(f"recall@1 {hits1 / args.queries:.3f}  recall@5 {hits5 / args.queries:.3f}")


if __name__ == "__main__":
    main()

"""Dense retrieval index build + query evaluation (inference only).

A small BERT-style bi-encoder (word-piece-ish hashing tokenizer, pre-LN
transformer, masked mean pooling) embeds a synthetic corpus of "support
articles" and builds an in-memory inner-product index.  Queries are then
generated as noisy sub-spans of random articles and scored against the index;
recall@k is reported.  Everything is seeded and synthetic; the encoder weights
are randomly initialised (standing in for a checkpoint), so the recall numbers
only reflect lexical overlap picked up by the random encoder.

Shape of the program:
  HashTokenizer  -> batch_encode(texts) -> (ids, attention_mask)
  BiEncoder      -> nn.Module, embeds (ids, mask) -> L2-normalised vectors
  IndexBuilder   -> streams documents in batches through the encoder
  Retriever      -> top-k search, recall evaluation

Planted problem:
  The documents are tokenised with ``padding="max_length"`` (the
  ``IndexBuilder`` built in ``main`` passes it to
  ``HashTokenizer.batch_encode`` from ``IndexBuilder.encode_texts``), so
  every batch is padded to the model's maximum sequence length of 512
  tokens although articles are only ~15-100 tokens long and queries ~10-30.
  The encoder therefore runs its linear layers over 5-30x more positions
  than needed and attention over a 512x512 score matrix per head; the padded
  positions are masked out, so results are unchanged and the work is wasted.

Fix (--fixed):
  Pad each batch only to the longest sequence in that batch
  (``padding="longest"``).  Embeddings, recall and checksum are identical up
  to float rounding.
"""

import argparse
import hashlib
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# --------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------

class EncoderConfig:
    vocab_size = 16384
    max_position = 512
    hidden = 128
    heads = 4
    layers = 2
    ffn = 512
    pad_id = 0
    cls_id = 1
    sep_id = 2
    unk_id = 3


# --------------------------------------------------------------------------
# synthetic corpus
# --------------------------------------------------------------------------

def make_lexicon(g, n_words=6000):
    syll = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa",
            "qu", "ra", "de", "fi", "go", "hu", "ja", "xe", "wy", "bo"]
    words = set()
    while len(words) < n_words:
        k = int(torch.randint(1, 4, (1,), generator=g))
        idx = torch.randint(0, len(syll), (k,), generator=g).tolist()
        words.add("".join(syll[i] for i in idx))
    return sorted(words)


def make_corpus(n_docs, seed=0):
    g = torch.Generator().manual_seed(seed)
    lex = make_lexicon(g)
    n_topics = 64
    # each topic prefers a subset of the lexicon (Zipf-ish inside the topic)
    topic_words = [torch.randperm(len(lex), generator=g)[:300] for _ in range(n_topics)]
    zipf = 1.0 / torch.arange(1, 301, dtype=torch.float32)
    docs = []
    for _ in range(n_docs):
        t = int(torch.randint(0, n_topics, (1,), generator=g))
        length = int(torch.randint(10, 60, (1,), generator=g))
        picks = torch.multinomial(zipf, length, replacement=True, generator=g)
        words = [lex[int(topic_words[t][p])] for p in picks.tolist()]
        docs.append(" ".join(words))
    return docs


def make_queries(docs, n_queries, seed=1):
    g = torch.Generator().manual_seed(seed)
    queries, targets = [], []
    for _ in range(n_queries):
        d = int(torch.randint(0, len(docs), (1,), generator=g))
        words = docs[d].split()
        span = int(torch.randint(8, 16, (1,), generator=g))
        start = int(torch.randint(0, max(1, len(words) - span), (1,), generator=g))
        q = words[start:start + span]
        # drop a couple of words to make it noisy
        keep = torch.rand(len(q), generator=g) > 0.15
        queries.append(" ".join(w for w, k in zip(q, keep.tolist()) if k))
        targets.append(d)
    return queries, targets


# --------------------------------------------------------------------------
# tokenizer
# --------------------------------------------------------------------------

class HashTokenizer:
    """Splits on whitespace, maps words (and long-word suffix pieces) to ids
    by a stable hash, wraps with [CLS] ... [SEP]."""

    def __init__(self, cfg):
        self.cfg = cfg
        self._cache = {}

    def _word_ids(self, w):
        ids = self._cache.get(w)
        if ids is None:
            pieces = [w] if len(w) <= 4 else [w[:4], "##" + w[4:]]
            ids = []
            for p in pieces:
                h = int.from_bytes(hashlib.blake2b(p.encode(), digest_size=4).digest(), "little")
                ids.append(4 + h % (self.cfg.vocab_size - 4))
            self._cache[w] = ids
        return ids

    def encode(self, text):
        ids = [self.cfg.cls_id]
        for w in text.split():
            ids.extend(self._word_ids(w))
        ids = ids[: self.cfg.max_position - 1]
        ids.append(self.cfg.sep_id)
        return ids

    def batch_encode(self, texts, padding="longest", max_length=None):
        seqs = [self.encode(t) for t in texts]
        if padding == "max_length":
            L = max_length or self.cfg.max_position
        else:
            L = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), L), self.cfg.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), L), dtype=torch.bool)
        for i, s in enumerate(seqs):
            ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[i, : len(s)] = True
        return ids, mask


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.h = cfg.heads
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.out = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, x, attn_bias):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias)
        return self.out(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.hidden)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.hidden)
        self.mlp = nn.Sequential(nn.Linear(cfg.hidden, cfg.ffn), nn.GELU(),
                                 nn.Linear(cfg.ffn, cfg.hidden))

    def forward(self, x, attn_bias):
        x = x + self.attn(self.ln1(x), attn_bias)
        return x + self.mlp(self.ln2(x))


class BiEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.hidden, padding_idx=cfg.pad_id)
        self.pos = nn.Embedding(cfg.max_position, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, 128)

    def forward(self, ids, mask):
        B, T = ids.shape
        pos = torch.arange(T)
        x = self.tok(ids) + self.pos(pos)[None]
        # additive key-padding bias, broadcast over heads and queries
        bias = torch.zeros(B, 1, 1, T, dtype=x.dtype)
        bias.masked_fill_(~mask[:, None, None, :], float("-inf"))
        for blk in self.blocks:
            x = blk(x, bias)
        x = self.ln_f(x)
        m = mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1)
        return F.normalize(self.proj(pooled), dim=-1)


# --------------------------------------------------------------------------
# index build / retrieval
# --------------------------------------------------------------------------

class IndexBuilder:
    def __init__(self, model, tokenizer, batch_size=64, padding="longest"):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.padding = padding

    def _batches(self, texts):
        for i in range(0, len(texts), self.batch_size):
            yield texts[i:i + self.batch_size]

    @torch.inference_mode()
    def encode_texts(self, texts):
        out = []
        for chunk in self._batches(texts):
            ids, mask = self.tokenizer.batch_encode(
                chunk, padding=self.padding, max_length=self.model.cfg.max_position)
            out.append(self.model(ids, mask))
        return torch.cat(out)

    def build(self, docs):
        t0 = time.perf_counter()
        emb = self.encode_texts(docs)
        dt = time.perf_counter() - t0
        print(f"indexed {len(docs)} docs in {dt:.2f}s ({len(docs) / dt:.0f} docs/s)")
        return emb


class Retriever:
    def __init__(self, index_emb):
        self.index = index_emb

    @torch.inference_mode()
    def search(self, q_emb, k=10):
        scores = q_emb @ self.index.T
        return scores.topk(k, dim=-1)

    def recall(self, q_emb, targets, ks=(1, 5, 10)):
        _, top = self.search(q_emb, max(ks))
        tgt = torch.tensor(targets)[:, None]
        return {k: (top[:, :k] == tgt).any(1).float().mean().item() for k in ks}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--docs", type=int, default=640)
    ap.add_argument("--queries", type=int, default=256)
    args = ap.parse_args()

    torch.manual_seed(0)
    cfg = EncoderConfig()
    model = BiEncoder(cfg).eval()
    tokenizer = HashTokenizer(cfg)

    docs = make_corpus(args.docs)
    queries, targets = make_queries(docs, args.queries)

    padding = "longest" if args.fixed else "max_length"  # PLANTED
    builder = IndexBuilder(model, tokenizer, batch_size=64, padding=padding)
    index = builder.build(docs)

    retriever = Retriever(index)
    q_emb = builder.encode_texts(queries)
    rec = retriever.recall(q_emb, targets)
    print("recall:", " ".join(f"@{k}={v:.3f}" for k, v in rec.items()))
    print(f"index checksum: {index.sum().item():.4f}")


if __name__ == "__main__":
    main()

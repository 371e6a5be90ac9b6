"""Embed a (synthetic) product catalogue into a dense index and measure recall@k.

Pipeline: catalogue generator -> fixed-size batches -> encoder -> index builder,
then a held-out set of noisy queries is searched against the index.
"""
import argparse
import itertools
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB_SIZE = 50_000
TOKENS_PER_ITEM = 32
NUM_TOPICS = 400
EMBED_DIM = 128


class BagEncoder(nn.Module):
    def __init__(self, vocab_size, dim):
        super().__init__()
        self.bag = nn.EmbeddingBag(vocab_size, dim, mode="mean")
        self.proj = nn.Linear(dim, dim)

    def forward(self, token_ids):
        return F.normalize(self.proj(self.bag(token_ids)), dim=-1)


def catalogue(num_items, seed):
    """Yield (item_id, tokens); each item mixes a topic vocabulary with generic words."""
    rng = np.random.default_rng(seed)
    topic_words = rng.integers(0, VOCAB_SIZE, size=(NUM_TOPICS, 200))
    topics = rng.integers(0, NUM_TOPICS, size=num_items)
    picks = rng.integers(0, 200, size=(num_items, TOKENS_PER_ITEM))
    generic = rng.integers(0, VOCAB_SIZE, size=(num_items, TOKENS_PER_ITEM))
    use_topic = rng.random((num_items, TOKENS_PER_ITEM)) < 0.6
    tokens = np.where(use_topic, topic_words[topics[:, None], picks], generic)
    for item_id in range(num_items):
        yield item_id, tokens[item_id]


def batched(stream, batch_size):
    while True:
        chunk = list(itertools.islice(stream, batch_size))
        if not chunk:
            return
        ids, tokens = zip(*chunk)
        yield list(ids), torch.from_numpy(np.stack(tokens))


def encode(encoder, batches):
    with torch.inference_mode():
        for ids, tokens in batches:
            yield ids, encoder(tokens)


def build_index(encoded_batches, concat_once=False):
    item_ids = []
    vectors = torch.empty(0, EMBED_DIM)
    pending = []
    for ids, emb in encoded_batches:
        item_ids.extend(ids)
        if concat_once:
            pending.append(emb)
        else:
            vectors = torch.cat([vectors, emb], dim=0)  # PLANTED
    if concat_once:
        vectors = torch.cat(pending, dim=0)
    return torch.tensor(item_ids), vectors


def make_queries(num_queries, num_items, seed):
    """Queries are random token subsets of catalogue items, plus some typo-like noise."""
    rng = np.random.default_rng(seed + 1)
    all_tokens = np.stack([t for _, t in catalogue(num_items, seed)])
    targets = rng.choice(num_items, size=num_queries, replace=False)
    keep = rng.random((num_queries, TOKENS_PER_ITEM)).argsort(axis=1)[:, :12]
    query_tokens = np.take_along_axis(all_tokens[targets], keep, axis=1)
    noise = rng.integers(0, VOCAB_SIZE, size=(num_queries, 4))
    return torch.from_numpy(np.concatenate([query_tokens, noise], axis=1)), torch.from_numpy(targets)


def search(encoder, index_ids, index_vectors, query_tokens, k, chunk=128):
    results = []
    with torch.inference_mode():
        for start in range(0, query_tokens.shape[0], chunk):
            q = encoder(query_tokens[start:start + chunk])
            scores = q @ index_vectors.T
            results.append(index_ids[scores.topk(k, dim=-1).indices])
    return torch.cat(results)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=64_000)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--queries", type=int, default=512)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    encoder = BagEncoder(VOCAB_SIZE, EMBED_DIM).eval()

    t0 = time.perf_counter()
    stream = catalogue(args.items, seed=42)
    index_ids, index_vectors = build_index(
        encode(encoder, batched(stream, args.batch_size)), concat_once=args.fixed)
    t1 = time.perf_counter()
    print(f"indexed {index_vectors.shape[0]} items (dim {index_vectors.shape[1]}) in {t1 - t0:.2f}s")

    query_tokens, targets = make_queries(args.queries, args.items, seed=42)
    retrieved = search(encoder, index_ids, index_vectors, query_tokens, args.k)
    hits = (retrieved == targets[:, None])
    recall_at_1 = hits[:, 0].float().mean().item()
    recall_at_k = hits.any(dim=1).float().mean().item()
    rank = torch.where(hits.any(1), hits.float().argmax(1) + 1, torch.full_like(targets, 0))
    mrr = torch.where(rank > 0, 1.0 / rank.clamp(min=1).float(), torch.zeros(())).mean().item()
    print(f"searched {args.queries} queries in {time.perf_counter() - t1:.2f}s")
    print(f"recall@1 {recall_at_1:.4f}  recall@{args.k} {recall_at_k:.4f}  MRR {mrr:.4f}")
    print(f"index checksum {index_vectors.sum().item():.4f}")


if __name__ == "__main__":
    main()

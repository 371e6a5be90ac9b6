"""Offline evaluation of a bi-encoder retriever.

Encodes a query set and a document corpus with a frozen dual encoder, scores
every query against the full corpus, keeps the top ``k_max`` documents per
query and reports the usual IR metrics (Recall@k, Precision@k, MRR@k, MAP@k,
nDCG@k) against graded relevance judgements (qrels).

The benchmark is synthetic: documents are bags of tokens drawn from a topic
mixture, queries are noisy token subsets of one "anchor" document, and other
documents of the same topic get lower relevance grades.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
class BagOfTokensEncoder(nn.Module):
    """EmbeddingBag + 2-layer MLP projection, L2-normalised output."""

    def __init__(self, vocab_size, dim=256, hidden=512, out_dim=128):
        super().__init__()
        self.emb = nn.EmbeddingBag(vocab_size, dim, mode="mean", padding_idx=0)
        self.proj = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(),
                                  nn.Linear(hidden, out_dim))
        self.skip = nn.Linear(dim, out_dim, bias=False)

    def forward(self, tokens):
        h = self.emb(tokens)
        return F.normalize(self.proj(h) + self.skip(h), dim=-1)


# --------------------------------------------------------------------------
# synthetic benchmark
# --------------------------------------------------------------------------
def build_benchmark(n_docs, n_queries, vocab, n_topics, doc_len, q_len, seed):
    g = torch.Generator().manual_seed(seed)
    # each topic prefers a random subset of the vocabulary
    topic_words = torch.randint(1, vocab, (n_topics, 400), generator=g)
    doc_topic = torch.randint(0, n_topics, (n_docs,), generator=g)
    own = topic_words[doc_topic].gather(
        1, torch.randint(0, 400, (n_docs, doc_len), generator=g))
    background = torch.randint(1, vocab, (n_docs, doc_len), generator=g)
    use_topic = torch.rand(n_docs, doc_len, generator=g) < 0.6
    docs = torch.where(use_topic, own, background)

    anchors = torch.randperm(n_docs, generator=g)[:n_queries]
    pick = torch.rand(n_queries, doc_len, generator=g).argsort(dim=1)[:, :q_len]
    queries = docs[anchors].gather(1, pick)
    noise = torch.randint(1, vocab, (n_queries, q_len), generator=g)
    queries = torch.where(torch.rand(n_queries, q_len, generator=g) < 0.3, noise, queries)

    # qrels: anchor has grade 3, up to 4 same-topic documents grade 1
    qrels = []
    for qi, a in enumerate(anchors.tolist()):
        rel = {a: 3}
        same = (doc_topic == doc_topic[a]).nonzero().flatten()
        extra = same[torch.randperm(len(same), generator=g)[:4]].tolist()
        for d in extra:
            rel.setdefault(d, 1)
        qrels.append(rel)
    return queries, docs, qrels


# --------------------------------------------------------------------------
# evaluator
# --------------------------------------------------------------------------
class RetrievalEvaluator:
    def __init__(self, model, queries, corpus, qrels, k_max=100,
                 encode_batch=1024, score_batch=32, fixed=False):
        self.model = model.eval()
        self.queries = queries
        self.corpus = corpus
        self.k_max = k_max
        self.encode_batch = encode_batch
        self.score_batch = score_batch
        self.fixed = fixed
        self.rel_ids, self.rel_grades = self._pack_qrels(qrels)
        self._ranked = None

    @staticmethod
    def _pack_qrels(qrels):
        width = max(len(r) for r in qrels)
        ids = torch.full((len(qrels), width), -1, dtype=torch.long)
        grades = torch.zeros(len(qrels), width)
        for i, rel in enumerate(qrels):
            items = sorted(rel.items(), key=lambda kv: -kv[1])
            ids[i, :len(items)] = torch.tensor([d for d, _ in items])
            grades[i, :len(items)] = torch.tensor([float(s) for _, s in items])
        return ids, grades

    @torch.inference_mode()
    def encode(self, tokens):
        out = [self.model(tokens[i:i + self.encode_batch])
               for i in range(0, len(tokens), self.encode_batch)]
        return torch.cat(out)

    @torch.inference_mode()
    def ranked(self):
        """Top-k_max document ids and scores per query (cached)."""
        if self._ranked is not None:
            return self._ranked
        q_emb = self.encode(self.queries)
        d_emb = self.encode(self.corpus)
        top_s, top_i = [], []
        for i in range(0, len(q_emb), self.score_batch):
            qb = q_emb[i:i + self.score_batch]
            if self.fixed:
                scores = qb @ d_emb.T
            else:
                scores = F.cosine_similarity(qb[:, None, :], d_emb[None, :, :], dim=-1)  # PLANTED
            s, idx = scores.topk(self.k_max, dim=1)
            top_s.append(s)
            top_i.append(idx)
        self._ranked = torch.cat(top_s), torch.cat(top_i)
        return self._ranked

    def _gains(self, k):
        """Graded gain of each of the top-k retrieved documents (Q x k)."""
        _, idx = self.ranked()
        idx = idx[:, :k]
        match = idx[:, :, None] == self.rel_ids[:, None, :]          # Q x k x R
        return (match.float() * self.rel_grades[:, None, :]).sum(-1)

    def _n_relevant(self):
        return (self.rel_ids >= 0).sum(1).float()

    def recall_at_k(self, k):
        hits = (self._gains(k) > 0).float().sum(1)
        return (hits / self._n_relevant()).mean().item()

    def precision_at_k(self, k):
        return ((self._gains(k) > 0).float().sum(1) / k).mean().item()

    def mrr_at_k(self, k):
        rel = self._gains(k) > 0
        first = torch.where(rel.any(1), rel.float().argmax(1) + 1, torch.zeros_like(rel[:, 0], dtype=torch.long))
        rr = torch.where(first > 0, 1.0 / first.clamp(min=1).float(), torch.zeros(len(first)))
        return rr.mean().item()

    def map_at_k(self, k):
        rel = (self._gains(k) > 0).float()
        cum = rel.cumsum(1)
        ranks = torch.arange(1, k + 1, dtype=torch.float32)
        ap = (rel * cum / ranks).sum(1) / self._n_relevant().clamp(max=k)
        return ap.mean().item()

    def ndcg_at_k(self, k):
        gains = self._gains(k)
        discounts = 1.0 / torch.log2(torch.arange(2, k + 2, dtype=torch.float32))
        dcg = ((2 ** gains - 1) * discounts).sum(1)
        ideal = self.rel_grades[:, :k]
        idcg = ((2 ** ideal - 1) * discounts[:ideal.shape[1]]).sum(1)
        return (dcg / idcg.clamp(min=1e-9)).mean().item()

    def run(self, ks=(1, 10, 100)):
        report = {}
        for k in ks:
            report[f"recall@{k}"] = self.recall_at_k(k)
            report[f"precision@{k}"] = self.precision_at_k(k)
        report["mrr@10"] = self.mrr_at_k(10)
        report["map@100"] = self.map_at_k(100)
        report["ndcg@10"] = self.ndcg_at_k(10)
        return report


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=10000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--vocab", type=int, default=30000)
    ap.add_argument("--topics", type=int, default=200)
    ap.add_argument("--k-max", type=int, default=100)
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(0)
    queries, corpus, qrels = build_benchmark(args.docs, args.queries, args.vocab,
                                             args.topics, doc_len=64, q_len=16, seed=1)
    model = BagOfTokensEncoder(args.vocab)   # stands in for a loaded checkpoint

    t0 = time.perf_counter()
    evaluator = RetrievalEvaluator(model, queries, corpus, qrels,
                                   k_max=args.k_max, fixed=args.fixed)
    report = evaluator.run()
    dt = time.perf_counter() - t0

    for name, value in report.items():
        print(f"{name:>14s}: {value:.4f}")
    top_s, top_i = evaluator.ranked()
    print(f"checksum={top_s[:, :10].sum().item():.2f} ids={int(top_i[:, 0].sum())} "
          f"eval_time={dt:.2f}s")


if __name__ == "__main__":
    main()

"""Synthetic citation graph: papers with topic labels, bag-of-words features
and a homophilous, age-biased citation structure (Cora/PubMed-like, larger)."""
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class CitationGraph:
    x: torch.Tensor            # (N, D) float32 standardised tf-idf features
    y: torch.Tensor            # (N,) int64 topic labels
    edge_index: torch.Tensor   # (2, E) int64, symmetric, with self-loops
    deg_inv_sqrt: torch.Tensor # (N,) float32, D^-1/2 of A + I
    train_idx: torch.Tensor
    val_idx: torch.Tensor
    test_idx: torch.Tensor

    @property
    def num_nodes(self) -> int:
        return self.x.size(0)

    @property
    def num_classes(self) -> int:
        return int(self.y.max()) + 1


def _sample_citations(topics, refs_per_paper, homophily, rng):
    """Paper i cites earlier papers; a same-topic paper with prob `homophily`.
    Older papers are favoured (u**2 skew), which gives a heavy-tailed in-degree."""
    n = topics.shape[0]
    n_refs = rng.poisson(refs_per_paper, size=n)
    citing = np.repeat(np.arange(n), n_refs)
    skew = rng.random(citing.shape[0]) ** 2
    cited = np.floor(skew * citing).astype(np.int64)          # any earlier paper

    order = np.argsort(topics, kind="stable")                 # ids grouped by topic
    starts = np.searchsorted(topics[order], np.arange(topics.max() + 1))
    rank_in_topic = np.empty(n, dtype=np.int64)
    rank_in_topic[order] = np.arange(n) - starts[topics[order]]

    same = (rng.random(citing.shape[0]) < homophily) & (rank_in_topic[citing] > 0)
    c = citing[same]
    pick = starts[topics[c]] + np.floor(skew[same] * rank_in_topic[c]).astype(np.int64)
    cited[same] = order[pick]

    keep = cited != citing
    return citing[keep], cited[keep]


def _bag_of_words(topics, vocab_size, words_per_doc, topic_share, rng):
    n, n_topics = topics.shape[0], topics.max() + 1
    topic_word = rng.dirichlet(np.full(vocab_size, 0.1), size=n_topics)
    block = vocab_size // n_topics                            # topic keywords
    for k in range(n_topics):
        topic_word[k, k * block:(k + 1) * block] += 1.5 / block
    cdf = np.cumsum(topic_word / topic_word.sum(1, keepdims=True), axis=1)

    words = rng.integers(0, vocab_size, size=(n, words_per_doc))   # background
    from_topic = rng.random((n, words_per_doc)) < topic_share
    u = rng.random((n, words_per_doc))
    for k in range(n_topics):
        rows = topics == k
        w = np.searchsorted(cdf[k], u[rows]).clip(max=vocab_size - 1)
        words[rows] = np.where(from_topic[rows], w, words[rows])

    counts = np.zeros((n, vocab_size), dtype=np.float32)
    np.add.at(counts, (np.repeat(np.arange(n), words_per_doc), words.ravel()), 1.0)
    return counts


def _tfidf(counts):
    df = (counts > 0).sum(0)
    idf = np.log((1 + counts.shape[0]) / (1 + df)) + 1.0
    x = np.log1p(counts) * idf
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return (x - x.mean(0)) / (x.std(0) + 1e-6)                # standardise columns


def gcn_norm(edge_index, num_nodes):
    """Symmetrise, drop duplicates, add self-loops; return edges and D^-1/2 of A + I."""
    src, dst = edge_index
    src, dst = torch.cat([src, dst]), torch.cat([dst, src])
    key = torch.unique(src * num_nodes + dst)                 # sorted by (src, dst)
    loops = torch.arange(num_nodes)
    src = torch.cat([key // num_nodes, loops])
    dst = torch.cat([key % num_nodes, loops])
    deg = torch.zeros(num_nodes).index_add_(0, dst, torch.ones(dst.numel()))
    return torch.stack([src, dst]), deg.pow(-0.5)


def make_citation_graph(num_papers=10000, num_topics=10, vocab_size=500,
                        refs_per_paper=6.0, homophily=0.5, words_per_doc=30,
                        topic_share=0.15, train_per_class=40, num_val=1000,
                        seed=0) -> CitationGraph:
    rng = np.random.default_rng(seed)
    topics = rng.integers(0, num_topics, size=num_papers)
    citing, cited = _sample_citations(topics, refs_per_paper, homophily, rng)
    x = _tfidf(_bag_of_words(topics, vocab_size, words_per_doc, topic_share, rng))

    edge_index = torch.from_numpy(np.stack([citing, cited]))
    edge_index, deg_inv_sqrt = gcn_norm(edge_index, num_papers)

    # Planetoid-style split: a few labelled papers per topic, fixed val/test sets
    perm = rng.permutation(num_papers)
    train = np.concatenate([perm[topics[perm] == k][:train_per_class] for k in range(num_topics)])
    rest = perm[~np.isin(perm, train)]
    return CitationGraph(
        x=torch.from_numpy(x.astype(np.float32)),
        y=torch.from_numpy(topics.astype(np.int64)),
        edge_index=edge_index,
        deg_inv_sqrt=deg_inv_sqrt.float(),
        train_idx=torch.from_numpy(np.sort(train)),
        val_idx=torch.from_numpy(np.sort(rest[:num_val])),
        test_idx=torch.from_numpy(np.sort(rest[num_val:])),
    )

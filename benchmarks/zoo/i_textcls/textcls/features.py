import torch

BIGRAM_PRIME = 1_000_003


class NgramHasher:
    """Maps token sequences to unigram ids plus hashed bigram ids."""

    def __init__(self, vocab_size, bigram_buckets):
        self.vocab_size = vocab_size
        self.bigram_buckets = bigram_buckets
        self.n_features = vocab_size + bigram_buckets

    def __call__(self, tokens):
        bigrams = (tokens[:-1] * BIGRAM_PRIME + tokens[1:]) % self.bigram_buckets
        return torch.cat([tokens, bigrams + self.vocab_size])


class IdfTable:
    """Smoothed inverse document frequency over a featurised corpus."""

    def __init__(self, doc_features, n_features):
        self.n_features = n_features
        self.n_docs = len(doc_features)
        self.flat = torch.cat(doc_features)
        lengths = torch.tensor([len(f) for f in doc_features])
        self.doc_index = torch.repeat_interleave(torch.arange(self.n_docs), lengths)

    def compute(self):
        pairs = torch.unique(self.doc_index * self.n_features + self.flat)
        df = torch.bincount(pairs % self.n_features, minlength=self.n_features).float()
        return torch.log((1.0 + self.n_docs) / (1.0 + df)) + 1.0

import torch


def make_corpus(n_docs, vocab_size, n_classes, min_len=20, max_len=80, seed=0):
    """Topic-mixture documents: a Zipfian background plus class-specific keywords."""
    gen = torch.Generator().manual_seed(seed)
    ranks = torch.arange(1, vocab_size + 1, dtype=torch.float)
    background = 1.0 / ranks
    class_probs = background.repeat(n_classes, 1)
    for c in range(n_classes):
        keywords = torch.randperm(vocab_size, generator=gen)[:60]
        class_probs[c, keywords] += background[60]
    class_probs /= class_probs.sum(1, keepdim=True)

    labels = torch.randint(0, n_classes, (n_docs,), generator=gen)
    lengths = torch.randint(min_len, max_len + 1, (n_docs,), generator=gen)
    tokens = torch.multinomial(class_probs[labels], max_len, replacement=True, generator=gen)
    docs = [tokens[i, :n] for i, n in enumerate(lengths.tolist())]
    return docs, labels

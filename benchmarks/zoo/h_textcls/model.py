"""Bag-of-embeddings + small MLP text classifier (fastText-style)."""
import torch
import torch.nn as nn


class FastTextClassifier(nn.Module):
    def __init__(self, vocab_size, num_classes, dim=64, hidden=128, dropout=0.1):
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, dim, mode="mean")
        self.head = nn.Sequential(
            nn.Linear(dim, hidden),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, flat_ids, offsets):
        pooled = self.embedding(flat_ids, offsets)
        return self.head(pooled)


def collate_batch(batch, tokenizer, max_len=128):
    """Tokenise raw (text, label) pairs into EmbeddingBag inputs."""
    ids, offsets, labels = [], [0], []
    for text, label in batch:
        tok = tokenizer.encode(text, max_len=max_len) or [tokenizer.unk_id]
        ids.extend(tok)
        offsets.append(offsets[-1] + len(tok))
        labels.append(label)
    return (torch.tensor(ids, dtype=torch.long),
            torch.tensor(offsets[:-1], dtype=torch.long),
            torch.tensor(labels, dtype=torch.long))

"""Entity-embedding MLP for tabular churn prediction."""
import torch
import torch.nn as nn


def embedding_dim(cardinality):
    # fast.ai-style rule of thumb
    return min(16, int(round(1.6 * cardinality ** 0.56)))


class TabularMLP(nn.Module):
    def __init__(self, cardinalities, n_numeric, hidden=(128, 64), dropout=0.1):
        super().__init__()
        self.embeddings = nn.ModuleList(
            nn.Embedding(card, embedding_dim(card)) for card in cardinalities
        )
        emb_total = sum(e.embedding_dim for e in self.embeddings)
        layers = []
        in_dim = emb_total + n_numeric
        for h in hidden:
            layers += [nn.Linear(in_dim, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(dropout)]
            in_dim = h
        layers.append(nn.Linear(in_dim, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, cat, num):
        embs = [emb(cat[:, i]) for i, emb in enumerate(self.embeddings)]
        x = torch.cat(embs + [num], dim=1)
        return self.mlp(x).squeeze(1)

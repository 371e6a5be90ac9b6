import torch.nn as nn


class TfidfBagClassifier(nn.Module):
    def __init__(self, n_features, n_classes, dim=64):
        super().__init__()
        self.bag = nn.EmbeddingBag(n_features, dim, mode="sum")
        self.mlp = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, n_classes))

    def forward(self, feat_ids, offsets, weights):
        return self.mlp(self.bag(feat_ids, offsets, per_sample_weights=weights))

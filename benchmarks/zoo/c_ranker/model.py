import torch.nn as nn


class Scorer(nn.Module):
    """Scores each (query, doc) feature vector independently."""

    def __init__(self, d_feat, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_feat, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, x):              # x: (B, D, F)
        return self.net(x).squeeze(-1)  # (B, D)

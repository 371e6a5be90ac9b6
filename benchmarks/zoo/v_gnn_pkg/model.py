"""Multi-layer GCN encoder with a linear read-out (Kipf & Welling, 2017)."""
import torch.nn.functional as F
from torch import nn

from layers import GCNConv


class GCN(nn.Module):
    def __init__(self, in_dim, hidden_dim, num_classes, num_layers=3,
                 dropout=0.5, contiguous_index=True):
        super().__init__()
        dims = [in_dim] + [hidden_dim] * num_layers
        self.convs = nn.ModuleList(
            GCNConv(d_in, d_out, contiguous_index=contiguous_index)
            for d_in, d_out in zip(dims[:-1], dims[1:]))
        self.dropout = dropout
        self.classifier = nn.Linear(hidden_dim, num_classes)

    def forward(self, x, edge_index, deg_inv_sqrt):
        h = x
        for conv in self.convs:
            h = F.relu(conv(h, edge_index, deg_inv_sqrt))
            h = F.dropout(h, p=self.dropout, training=self.training)
        return self.classifier(h)

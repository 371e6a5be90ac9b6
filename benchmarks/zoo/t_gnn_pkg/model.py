"""GraphSAGE (mean aggregator) with CSR message passing."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class NeighbourMean(torch.autograd.Function):
    """out[i] = mean_{j in N(i)} h[j].

    embedding_bag over the CSR column indices is a fused gather + segment
    mean, so no (E, F) message tensor is materialised. The backward pass
    scatters the gradient along the transposed lists, weighted by 1/deg."""

    @staticmethod
    def forward(ctx, h, g):
        ctx.g = g
        return F.embedding_bag(g.col, h, g.rowptr[:-1], mode="mean")

    @staticmethod
    def backward(ctx, grad_out):
        g = ctx.g
        grad_h = F.embedding_bag(g.t_col, grad_out, g.t_rowptr[:-1], mode="sum",
                                 per_sample_weights=g.t_weight.to(grad_out.dtype))
        return grad_h, None


class SAGEConv(nn.Module):
    """h_i' = W_self h_i + W_neigh mean_{j in N(i)} h_j"""

    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.lin_self = nn.Linear(in_dim, out_dim)
        self.lin_neigh = nn.Linear(in_dim, out_dim, bias=False)

    def forward(self, h, graph):
        neigh = NeighbourMean.apply(h, graph)
        return self.lin_self(h) + self.lin_neigh(neigh)


class GraphSAGE(nn.Module):
    def __init__(self, in_dim, hidden_dim, num_classes, num_layers=2, dropout=0.5):
        super().__init__()
        dims = [in_dim] + [hidden_dim] * (num_layers - 1) + [num_classes]
        self.convs = nn.ModuleList(SAGEConv(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, h, graph):
        for i, conv in enumerate(self.convs):
            h = conv(h, graph)
            if i < len(self.convs) - 1:
                h = F.relu(h)
                h = F.dropout(h, p=self.dropout, training=self.training)
        return h

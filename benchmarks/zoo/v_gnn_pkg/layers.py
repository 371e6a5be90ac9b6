"""Hand-written GCN message passing (Kipf & Welling) without PyG."""
import torch
from torch import nn


def broadcast_index(index: torch.Tensor, num_features: int,
                    contiguous: bool = True) -> torch.Tensor:
    """(E,) node ids -> (E, F) index for gather/scatter along dim 0."""
    index = index.unsqueeze(-1)
    if contiguous:
        return index.repeat(1, num_features)  # PLANTED
    return index.expand(-1, num_features)


def gather_rows(h: torch.Tensor, index: torch.Tensor, contiguous_index: bool = True):
    """messages[e] = h[index[e]]"""
    return h.gather(0, broadcast_index(index, h.size(-1), contiguous_index))


def scatter_sum(messages: torch.Tensor, index: torch.Tensor, num_nodes: int,
                contiguous_index: bool = True) -> torch.Tensor:
    """out[i] = sum of messages[e] over edges e with index[e] == i."""
    out = messages.new_zeros(num_nodes, messages.size(-1))
    return out.scatter_add_(0, broadcast_index(index, messages.size(-1), contiguous_index),
                            messages)


class GCNConv(nn.Module):
    """h_i' = d_i^-1/2 sum_{j in N(i) u {i}} d_j^-1/2 (W h_j) + b   (Kipf & Welling).

    The symmetric normalisation factorises over the two endpoints, so it is applied
    to node rows before and after propagation instead of to every edge message.
    The linear map is applied first, which is cheaper whenever out_dim <= in_dim."""

    def __init__(self, in_dim: int, out_dim: int, contiguous_index: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_dim, out_dim))
        self.bias = nn.Parameter(torch.zeros(out_dim))
        self.contiguous_index = contiguous_index
        nn.init.xavier_uniform_(self.weight)

    def propagate(self, h, edge_index):
        src, dst = edge_index
        messages = gather_rows(h, src, self.contiguous_index)
        return scatter_sum(messages, dst, h.size(0), self.contiguous_index)

    def forward(self, x, edge_index, deg_inv_sqrt):
        norm = deg_inv_sqrt.unsqueeze(-1)
        return self.propagate((x @ self.weight) * norm, edge_index) * norm + self.bias

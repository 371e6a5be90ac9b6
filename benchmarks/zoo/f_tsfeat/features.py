"""ROCKET-style random convolutional features for time series."""
import torch
from torch import nn


class RandomConvFeatures(nn.Module):
    """Bank of random dilated 1-D kernels; each kernel yields (max, PPV)."""

    def __init__(self, n_channels, kernels_per_dilation=10, dilations=(1, 2, 4, 8),
                 kernel_size=9, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.convs = nn.ModuleList()
        for d in dilations:
            conv = nn.Conv1d(n_channels, kernels_per_dilation, kernel_size,
                             dilation=d, padding=(kernel_size - 1) * d // 2)
            w = torch.randn(conv.weight.shape, generator=g)
            conv.weight.data.copy_(w - w.mean(dim=-1, keepdim=True))
            conv.bias.data.uniform_(-1, 1, generator=g)
            conv.requires_grad_(False)
            self.convs.append(conv)

    @property
    def n_features(self):
        return 2 * sum(c.out_channels for c in self.convs)

    def forward(self, x):
        feats = []
        for conv in self.convs:
            h = conv(x)
            feats.append(h.amax(dim=-1))
            feats.append((h > 0).float().mean(dim=-1))
        return torch.cat(feats, dim=1)


@torch.inference_mode()
def extract(transform, loader):
    xs, ys = [], []
    for x, y in loader:
        xs.append(transform(x))
        ys.append(y)
    return torch.cat(xs), torch.cat(ys)

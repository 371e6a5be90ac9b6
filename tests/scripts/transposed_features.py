"""Mean of each node's neighbours' features, many times over (a graph layer's aggregation): the
features were built feature-major and handed out as `feats.T`, a column-major view, so
embedding_bag takes its strided loop; `--fixed` makes the view contiguous once."""
import sys

import torch
import torch.nn.functional as F


def node_features(n: int, d: int) -> torch.Tensor:
    feats = torch.randn(d, n)  # feature-major, as a whitening step returns it
    if "--fixed" in sys.argv:
        return feats.T.contiguous()
    return feats.T  # PLANTED


torch.manual_seed(0)
n, d = 20000, 256
x = node_features(n, d)
offsets = torch.arange(0, 8 * n, 8)
total = 0.0
for step in range(12):
    neighbours = torch.randint(0, n, (8 * n,))  # sampled afresh each pass
    mean = F.embedding_bag(neighbours, x, offsets, mode="mean")  # the aggregation
    total += float(mean[0, 0])
print(round(total, 3))

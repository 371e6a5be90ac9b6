"""NT-Xent: normalized temperature-scaled cross entropy over 2N views."""
import torch
import torch.nn.functional as F


def nt_xent(z_a, z_b, temperature=0.2):
    """Returns the loss and the fraction of anchors whose positive ranks first."""
    n = z_a.shape[0]
    z = F.normalize(torch.cat([z_a, z_b]), dim=1)
    logits = (z @ z.t() / temperature).fill_diagonal_(float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(n)])
    with torch.no_grad():
        acc = (logits.argmax(1) == targets).float().mean()
    return F.cross_entropy(logits, targets), acc

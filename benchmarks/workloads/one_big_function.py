"""One big function: a long chain of different large ops, run once, nothing repeats (~3 s bare)."""
import torch


def pipeline(seed: int) -> float:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(768, 768, generator=g)
    b = torch.randn(768, 768, generator=g)
    c = a @ b
    d = torch.linalg.qr(c[:512, :512]).Q
    e = torch.fft.rfft2(c).abs()
    f = torch.nn.functional.conv2d(c[None, None], torch.randn(8, 1, 5, 5, generator=g), padding=2)
    h = torch.sort(f.flatten()).values[::97]
    i = torch.linalg.svdvals(d)
    j = torch.cumsum(e.flatten(), 0)[::1000]
    return float(h.sum() + i.sum() + j.sum() + torch.logsumexp(c, dim=0).sum())


print(pipeline(0) + pipeline(1))

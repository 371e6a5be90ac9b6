"""SimCLR augmentations as batched tensor functions, parameters drawn per image from g."""
import math

import torch
import torch.nn.functional as F

_GRAY = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)
# RGB -> YIQ; a hue shift is a rotation of the (I, Q) chroma plane
_YIQ = torch.tensor([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]])
_YIQ_INV = torch.linalg.inv(_YIQ)


def _uniform(n, lo, hi, g):
    return lo + (hi - lo) * torch.rand(n, generator=g)


def _coin(n, p, g):
    return (torch.rand(n, generator=g) < p).view(-1, 1, 1, 1)


def random_resized_crop(x, g, size, scale=(0.2, 1.0), ratio=(3 / 4, 4 / 3)):
    b = x.shape[0]
    area = _uniform(b, *scale, g)
    aspect = torch.exp(_uniform(b, math.log(ratio[0]), math.log(ratio[1]), g))
    w, h = (area * aspect).sqrt().clamp(max=1.0), (area / aspect).sqrt().clamp(max=1.0)
    theta = torch.zeros(b, 2, 3)
    theta[:, 0, 0], theta[:, 1, 1] = w, h
    theta[:, 0, 2] = (2 * torch.rand(b, generator=g) - 1) * (1 - w)
    theta[:, 1, 2] = (2 * torch.rand(b, generator=g) - 1) * (1 - h)
    grid = F.affine_grid(theta, [b, x.shape[1], size, size], align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)


def color_jitter(x, g, brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1, p=0.8):
    n = x.shape[0]
    on = _coin(n, p, g).float().view(-1)
    b, c, s = (1 + on * _uniform(n, -m, m, g) for m in (brightness, contrast, saturation))
    angle = 2 * math.pi * on * _uniform(n, -hue, hue, g)
    x = (x * b.view(-1, 1, 1, 1)).clamp(0, 1)
    mean = (x * _GRAY).sum(1, keepdim=True).mean((2, 3), keepdim=True)
    x = ((x - mean) * c.view(-1, 1, 1, 1) + mean).clamp(0, 1)
    gray = (x * _GRAY).sum(1, keepdim=True)
    x = ((x - gray) * s.view(-1, 1, 1, 1) + gray).clamp(0, 1)
    rot = torch.eye(3).repeat(n, 1, 1)
    rot[:, 1, 1], rot[:, 1, 2] = torch.cos(angle), -torch.sin(angle)
    rot[:, 2, 1], rot[:, 2, 2] = torch.sin(angle), torch.cos(angle)
    return torch.einsum("nij,njhw->nihw", _YIQ_INV @ rot @ _YIQ, x).clamp(0, 1)


def gaussian_blur(x, g, p=0.5, sigma=(0.1, 2.0), kernel_size=5):
    b, c, hgt, wid = x.shape
    apply = _coin(b, p, g)
    s = _uniform(b, *sigma, g)
    r = kernel_size // 2
    k = torch.exp(-torch.arange(-r, r + 1.0)[None] ** 2 / (2 * s[:, None] ** 2))
    k = (k / k.sum(1, keepdim=True)).repeat_interleave(c, 0)  # one 1-D kernel per (image, channel)
    y = F.pad(x.reshape(1, b * c, hgt, wid), (r, r, r, r), mode="reflect")
    y = F.conv2d(y, k.view(b * c, 1, 1, kernel_size), groups=b * c)
    y = F.conv2d(y, k.view(b * c, 1, kernel_size, 1), groups=b * c)
    return torch.where(apply, y.view(b, c, hgt, wid), x)


class SimCLRAugment:
    """The SimCLR (CIFAR variant) view distribution."""

    def __init__(self, size=32, min_scale=0.2, gray_p=0.2, blur_p=0.5):
        self.size, self.min_scale, self.gray_p, self.blur_p = size, min_scale, gray_p, blur_p

    def __call__(self, x, g):
        x = random_resized_crop(x, g, self.size, scale=(self.min_scale, 1.0))
        x = torch.where(_coin(x.shape[0], 0.5, g), x.flip(-1), x)
        x = color_jitter(x, g)
        x = torch.where(_coin(x.shape[0], self.gray_p, g), (x * _GRAY).sum(1, keepdim=True), x)
        return gaussian_blur(x, g, p=self.blur_p).contiguous()

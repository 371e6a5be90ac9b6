"""Batch feature extraction for synthetic microscopy tiles.

Pipeline (generators): synthesize tiles -> flat-field + normalise -> compute
per-patch texture descriptors (intensity stats + gradient-orientation
histogram) -> accumulate a streaming covariance -> PCA summary.
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

N_BINS = 8


def gaussian_kernel1d(sigma):
    radius = int(3 * sigma)
    x = torch.arange(-radius, radius + 1, dtype=torch.float32)
    k = torch.exp(-x ** 2 / (2 * sigma ** 2))
    return k / k.sum(), radius


def separable_blur(img, sigma):
    k, radius = gaussian_kernel1d(sigma)
    k = k.view(1, 1, 1, -1)
    out = F.conv2d(F.pad(img, (radius, radius, 0, 0), mode="reflect"), k)
    return F.conv2d(F.pad(out, (0, 0, radius, radius), mode="reflect"), k.transpose(2, 3))


def synth_tiles(n_tiles, size, seed):
    gen = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(-0.5, 0.5, size), torch.linspace(-0.5, 0.5, size), indexing="ij")
    vignette = 1.0 - 0.3 * (yy ** 2 + xx ** 2)
    for idx in range(n_tiles):
        n_cells = int(torch.randint(20, 60, (1,), generator=gen))
        pos = torch.randint(0, size, (n_cells, 2), generator=gen)
        bright = 0.5 + torch.rand(n_cells, generator=gen)
        impulses = torch.zeros(size, size)
        impulses.index_put_((pos[:, 0], pos[:, 1]), bright * 60.0, accumulate=True)
        cells = separable_blur(impulses[None, None], sigma=3.0)[0, 0]
        noise = 0.05 * torch.randn(size, size, generator=gen)
        yield idx, (cells + 0.2) * vignette + noise


def flat_field(tiles, block=32):
    for idx, tile in tiles:
        img = tile[None, None]
        coarse = F.avg_pool2d(img, block)
        bg = F.interpolate(coarse, size=tile.shape, mode="bilinear", align_corners=False)
        corrected = img / bg.clamp(min=1e-3)
        corrected = (corrected - corrected.mean()) / corrected.std()
        yield idx, corrected[0, 0]


def gradients(img):
    sobel = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]) / 8.0
    kernels = torch.stack([sobel, sobel.t()])[:, None]
    g = F.conv2d(F.pad(img[None, None], (1, 1, 1, 1), mode="replicate"), kernels)[0]
    gx, gy = g[0], g[1]
    mag = torch.sqrt(gx ** 2 + gy ** 2)
    ori = torch.atan2(gy, gx) % math.pi
    bins = (ori / math.pi * N_BINS).long().clamp(max=N_BINS - 1)
    return mag, bins


def describe_patch(img_p, mag_p, bins_p):
    hist = torch.bincount(bins_p.reshape(-1), weights=mag_p.reshape(-1), minlength=N_BINS)
    hist = hist / (hist.sum() + 1e-6)
    stats = torch.stack([img_p.mean(), img_p.std(), img_p.amax() - img_p.amin(), mag_p.mean()])
    return torch.cat([stats, hist])


def describe_patches_batched(img, mag, bins, patch):
    def to_patches(t):
        return t.unfold(0, patch, patch).unfold(1, patch, patch).reshape(-1, patch * patch)
    img_p, mag_p, bins_p = to_patches(img), to_patches(mag), to_patches(bins)
    hist = torch.zeros(img_p.shape[0], N_BINS).scatter_add_(1, bins_p, mag_p)
    hist = hist / (hist.sum(dim=1, keepdim=True) + 1e-6)
    stats = torch.stack([img_p.mean(1), img_p.std(1), img_p.amax(1) - img_p.amin(1), mag_p.mean(1)], dim=1)
    return torch.cat([stats, hist], dim=1)


def patch_descriptors(tiles, patch, fixed):
    for idx, img in tiles:
        mag, bins = gradients(img)
        h, w = img.shape
        if fixed:
            desc = describe_patches_batched(img, mag, bins, patch)
        else:
            desc = torch.stack([  # PLANTED
                describe_patch(img[i:i + patch, j:j + patch], mag[i:i + patch, j:j + patch],
                               bins[i:i + patch, j:j + patch])
                for i in range(0, h - patch + 1, patch) for j in range(0, w - patch + 1, patch)
            ])
        yield idx, desc


class StreamingCovariance:
    def __init__(self, dim):
        self.n = 0
        self.mean = torch.zeros(dim, dtype=torch.float64)
        self.m2 = torch.zeros(dim, dim, dtype=torch.float64)

    def update(self, x):
        x = x.double()
        n_b = x.shape[0]
        mean_b = x.mean(0)
        centered = x - mean_b
        delta = mean_b - self.mean
        total = self.n + n_b
        self.m2 += centered.t() @ centered + torch.outer(delta, delta) * self.n * n_b / total
        self.mean += delta * n_b / total
        self.n = total

    def covariance(self):
        return self.m2 / (self.n - 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tiles", type=int, default=112)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--patch", type=int, default=8)
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(1)

    t0 = time.perf_counter()
    stream = patch_descriptors(flat_field(synth_tiles(args.tiles, args.size, seed=1)), args.patch, args.fixed)
    acc = StreamingCovariance(4 + N_BINS)
    n_patches = 0
    for idx, desc in stream:
        acc.update(desc)
        n_patches += desc.shape[0]
    elapsed = time.perf_counter() - t0

    evals, evecs = torch.linalg.eigh(acc.covariance())
    explained = (evals.flip(0) / evals.sum())[:4]
    print(f"processed {args.tiles} tiles / {n_patches} patches in {elapsed:.2f}s")
    print("descriptor mean:", " ".join(f"{v:.4f}" for v in acc.mean.tolist()))
    print("PCA explained variance (top 4):", " ".join(f"{v:.4f}" for v in explained.tolist()))


if __name__ == "__main__":
    main()

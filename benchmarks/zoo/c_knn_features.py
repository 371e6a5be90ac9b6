"""Point-cloud geometric feature extraction (no training): for every point, find its
k nearest neighbours and compute covariance-eigenvalue descriptors
(linearity / planarity / scattering / verticality), then save them."""
import argparse
import time

import torch

K = 16


def synth_scene(n, seed):
    g = torch.Generator().manual_seed(seed)
    n1, n2 = n // 2, n // 4
    n3 = n - n1 - n2
    ground = torch.cat([torch.rand(n1, 2, generator=g) * 40 - 20, 0.05 * torch.randn(n1, 1, generator=g)], 1)
    t = torch.rand(n2, 1, generator=g) * 12
    poles = torch.cat([0.1 * torch.randn(n2, 2, generator=g) + torch.tensor([3.0, -4.0]), t], 1)
    z = torch.rand(n3, 1, generator=g) * 6
    ang = torch.rand(n3, 1, generator=g) * 6.283
    wall = torch.cat([torch.cos(ang) * 8, torch.sin(ang) * 8, z], 1) + 0.05 * torch.randn(n3, 3, generator=g)
    return torch.cat([ground, poles, wall], 0)


def knn_indices(query, points, k, fixed):
    d = torch.cdist(query, points)
    if fixed:
        return d.topk(k, dim=1, largest=False).indices
    return d.argsort(dim=1)[:, :k]  # PLANTED


def eigen_features(points, nbr_idx):
    nb = points[nbr_idx]                           # (m, k, 3)
    centred = nb - nb.mean(1, keepdim=True)
    cov = centred.transpose(1, 2) @ centred / nb.shape[1]
    evals, evecs = torch.linalg.eigh(cov)          # ascending
    l3, l2, l1 = evals.clamp_min(1e-9).unbind(-1)
    normal = evecs[..., 0]
    return torch.stack([
        (l1 - l2) / l1,                 # linearity
        (l2 - l3) / l1,                 # planarity
        l3 / l1,                        # scattering
        1 - normal[:, 2].abs(),         # verticality
        (l1 * l2 * l3).pow(1 / 3),      # omnivariance
    ], 1)


def extract(points, chunk, fixed):
    feats = []
    for s in range(0, len(points), chunk):
        idx = knn_indices(points[s:s + chunk], points, K, fixed)
        feats.append(eigen_features(points, idx))
    return torch.cat(feats)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--points", type=int, default=10000)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    pts = synth_scene(args.points, 0)
    t0 = time.time()
    f = extract(pts, 512, args.fixed)
    print(f"features {tuple(f.shape)} in {time.time() - t0:.2f}s")
    print("mean descriptor:", [round(v, 3) for v in f.mean(0).tolist()])
    if args.out:
        torch.save(f, args.out)


if __name__ == "__main__":
    main()

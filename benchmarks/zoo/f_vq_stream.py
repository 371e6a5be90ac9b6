"""Streaming residual vector-quantisation of an embedding dump.

Shards of embeddings are pulled through a chain of generators:
    read_shards -> whiten -> quantise -> summarise
so only one shard is ever resident. Codebooks stand in for the ones produced
by the offline k-means job.
"""
import argparse
import time

import torch
import torch.nn.functional as F

FIXED = False


def read_shards(n_shards, shard_size, dim, seed=0):
    """Pretend-reader: yields (shard_id, embeddings) like an iterator over .npy shards."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(64, dim, generator=g) * 2.0
    for sid in range(n_shards):
        which = torch.randint(0, centres.shape[0], (shard_size,), generator=g)
        x = centres[which] + 0.7 * torch.randn(shard_size, dim, generator=g)
        yield sid, x


def whiten(stream, mean, proj):
    for sid, x in stream:
        z = (x - mean) @ proj
        yield sid, F.normalize(z, dim=1)


def sq_dists(x, codebook):
    """Squared euclidean distance from every row of x to every code."""
    if FIXED:
        return (x.pow(2).sum(1, keepdim=True)
                - 2.0 * x @ codebook.T
                + codebook.pow(2).sum(1).unsqueeze(0))
    return ((x[:, None, :] - codebook[None, :, :]) ** 2).sum(-1)  # PLANTED


def quantise(stream, codebooks):
    for sid, x in stream:
        residual = x
        codes = []
        for cb in codebooks:
            idx = sq_dists(residual, cb).argmin(dim=1)
            codes.append(idx)
            residual = residual - cb[idx]
        yield sid, torch.stack(codes, dim=1), x, residual


def summarise(stream, codebook_sizes):
    usage = [torch.zeros(k, dtype=torch.long) for k in codebook_sizes]
    total_err, n_rows = 0.0, 0
    for sid, codes, x, residual in stream:
        for level, k in enumerate(codebook_sizes):
            usage[level] += torch.bincount(codes[:, level], minlength=k)
        err = residual.pow(2).sum(1)
        total_err += err.sum().item()
        n_rows += x.shape[0]
        if sid % 4 == 0:
            print(f"  shard {sid:3d}: mse {err.mean().item():.5f}")
        yield sid, codes
    summarise.result = (usage, total_err / n_rows, n_rows)


def make_codebooks(calib, sizes, seed=123):
    """Seed each level's codebook from calibration rows (k-means++ would refine these)."""
    g = torch.Generator().manual_seed(seed)
    books, residual = [], calib
    for k in sizes:
        pick = torch.randperm(residual.shape[0], generator=g)[:k]
        cb = residual[pick].clone()
        books.append(cb)
        residual = residual - cb[sq_dists(residual, cb).argmin(dim=1)]
    return books


def main():
    global FIXED
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--shards", type=int, default=10)
    args = ap.parse_args()
    FIXED = args.fixed
    torch.manual_seed(0)

    dim, shard_size, sizes = 96, 2048, (256, 256)
    g = torch.Generator().manual_seed(5)
    mean = torch.zeros(dim)
    proj = torch.linalg.qr(torch.randn(dim, dim, generator=g)).Q
    _, calib = next(whiten(read_shards(1, shard_size, dim), mean, proj))
    codebooks = make_codebooks(calib, sizes)

    t0 = time.perf_counter()
    stream = read_shards(args.shards, shard_size, dim)
    stream = whiten(stream, mean, proj)
    stream = quantise(stream, codebooks)
    all_codes = [codes for _, codes in summarise(stream, sizes)]
    usage, mse, n_rows = summarise.result
    codes = torch.cat(all_codes)
    print(f"encoded {n_rows} vectors in {time.perf_counter() - t0:.2f}s")
    print(f"mean residual sq-error {mse:.5f}")
    for level, u in enumerate(usage):
        print(f"level {level}: {int((u > 0).sum())}/{u.numel()} codes used, "
              f"max share {u.max().item() / n_rows:.3f}")
    print(f"code checksum {int(codes[:, 0].sum())} {int(codes[:, 1].sum())}")


if __name__ == "__main__":
    main()

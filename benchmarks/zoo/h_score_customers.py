"""Nightly batch scoring job: propensity scores + customer embeddings.

Loads the latest propensity checkpoint, scores every customer in the
warehouse extract in fixed-size chunks and exports (score, embedding)
for the CRM and the look-alike clustering job.
"""
import argparse
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

CAT_CARDS = [52, 12, 7, 30, 200]   # state, plan, segment, channel, zip3 bucket
N_NUM = 18
EMB_OUT = 16


class PropensityModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embs = nn.ModuleList(nn.Embedding(c, min(10, (c + 1) // 2)) for c in CAT_CARDS)
        d_in = sum(e.embedding_dim for e in self.embs) + N_NUM
        self.encoder = nn.Sequential(nn.Linear(d_in, 64), nn.GELU(), nn.Linear(64, EMB_OUT))
        self.head = nn.Linear(EMB_OUT, 1)

    def forward(self, cat, num):
        x = torch.cat([e(cat[:, i]) for i, e in enumerate(self.embs)] + [num], dim=1)
        z = self.encoder(x)
        return torch.sigmoid(self.head(torch.relu(z))).squeeze(1), z


def warehouse_extract(n_rows, seed=7):
    """Stand-in for the SQL extract: int64 categorical codes + float numerics."""
    rng = np.random.default_rng(seed)
    cat = np.stack([rng.integers(0, c, n_rows) for c in CAT_CARDS], axis=1)
    num = rng.standard_normal((n_rows, N_NUM), dtype=np.float32)
    customer_id = np.arange(10_000_000, 10_000_000 + n_rows)
    return {"customer_id": customer_id, "cat": cat, "num": num}


def ensure_checkpoint(path):
    if not os.path.exists(path):
        torch.manual_seed(42)
        torch.save({"model": PropensityModel().state_dict(), "version": "demo"}, path)
    return path


def load_model(path):
    ckpt = torch.load(path, map_location="cpu")
    model = PropensityModel()
    model.load_state_dict(ckpt["model"])
    model.eval()
    print(f"loaded checkpoint version={ckpt['version']}")
    return model


def iter_chunks(extract, chunk_size):
    n = extract["cat"].shape[0]
    for start in range(0, n, chunk_size):
        stop = min(start + chunk_size, n)
        yield (torch.from_numpy(extract["cat"][start:stop]),
               torch.from_numpy(extract["num"][start:stop]))


@torch.inference_mode()
def score_all(model, extract, chunk_size, fixed=False):
    scores = torch.empty(0)
    embeddings = torch.empty(0, EMB_OUT)
    score_parts, emb_parts = [], []
    for cat, num in iter_chunks(extract, chunk_size):
        s, z = model(cat, num)
        if fixed:
            score_parts.append(s)
            emb_parts.append(z)
        else:
            scores = torch.cat([scores, s])
            embeddings = torch.cat([embeddings, z])  # PLANTED
    if fixed:
        scores, embeddings = torch.cat(score_parts), torch.cat(emb_parts)
    return scores, embeddings


def decile_report(scores):
    qs = torch.quantile(scores[:: max(1, scores.numel() // 200_000)],
                        torch.linspace(0, 1, 11))
    print("score deciles:", " ".join(f"{q:.3f}" for q in qs.tolist()))


def export(out_dir, extract, scores, embeddings, top_k=1000):
    top = torch.topk(scores, top_k).indices.numpy()
    np.save(os.path.join(out_dir, "top_customers.npy"), extract["customer_id"][top])
    np.save(os.path.join(out_dir, "embeddings_fp16.npy"), embeddings.half().numpy())
    return top


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_200_000)
    ap.add_argument("--chunk-size", type=int, default=4096)
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as work:
        model = load_model(ensure_checkpoint(os.path.join(work, "propensity.pt")))
        extract = warehouse_extract(args.rows)
        t0 = time.time()
        scores, embeddings = score_all(model, extract, args.chunk_size, fixed=args.fixed)
        elapsed = time.time() - t0
        print(f"scored {scores.numel():,} customers in {elapsed:.1f}s "
              f"({scores.numel() / elapsed:,.0f} rows/s)")
        decile_report(scores)
        top = export(work, extract, scores, embeddings)
        print(f"mean score={scores.mean():.4f}  top-1000 min score={scores[top].min():.4f}  "
              f"embedding norm={embeddings.norm(dim=1).mean():.3f}")


if __name__ == "__main__":
    main()

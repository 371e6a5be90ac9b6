"""Listwise candidate re-ranking service.

A RerankService pulls incoming requests (user features + 32 candidate item ids)
from a request stream, polls them in windows of up to 64, scores every
candidate with a small listwise transformer-style model and returns the top-10
items per request. At the end it prints a checksum of the returned scores and
the elapsed time.

Planted problem: the service config sets max_batch = 1, so each request gets
its own forward pass. The model is made of ~50 small kernels (plus ~5 for
softmax/top-k), so with one request per forward the GPU sits idle while Python
and kernel launches run (the program is bound by the CPU launch rate). With --fixed, max_batch = 64: all requests in
a polling window are scored together in one forward pass, which needs the same
number of kernel launches per window instead of per request. Results are the
same except for float rounding.
"""
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = "--fixed" in sys.argv
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

N_REQUESTS = 12000 if DEVICE == "cuda" else 1000
USER_DIM = 48
N_CANDIDATES = 32
ITEM_VOCAB = 50_000
EMB = 64
TOP_K = 10


@dataclass
class ServiceConfig:
    poll_window: int = 64
    max_batch: int = 64 if FIXED else 1  # PLANTED: one request per forward pass; ~50 tiny kernels each, CPU launch-bound
    top_k: int = TOP_K
    temperature: float = 0.7


@dataclass
class Request:
    request_id: int
    user_features: np.ndarray   # float32 [USER_DIM]
    candidates: np.ndarray      # int64 [N_CANDIDATES]


@dataclass
class Response:
    request_id: int
    items: list
    scores: list


def request_stream(n, seed=1234):
    rng = np.random.default_rng(seed)
    for i in range(n):
        yield Request(
            request_id=i,
            user_features=rng.standard_normal(USER_DIM, dtype=np.float32),
            candidates=rng.integers(0, ITEM_VOCAB, size=N_CANDIDATES, dtype=np.int64),
        )


class ResidualFF(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class CrossLayer(nn.Module):
    """DCN-v2 style explicit feature crossing."""

    def __init__(self, dim):
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x0, x):
        return x0 * self.lin(x) + x


class ListwiseAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, c, d = x.shape
        h = self.norm(x)
        q, k, v = self.qkv(h).view(b, c, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v)
        a = a.transpose(1, 2).reshape(b, c, d)
        return x + self.out(a)


class RerankModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.user_tower = nn.Sequential(
            nn.Linear(USER_DIM, 128), nn.LayerNorm(128), nn.GELU(),
            nn.Linear(128, EMB), nn.LayerNorm(EMB),
        )
        self.item_emb = nn.Embedding(ITEM_VOCAB, EMB)
        self.item_blocks = nn.ModuleList([ResidualFF(EMB, 2 * EMB) for _ in range(2)])
        dim = 3 * EMB
        self.cross = nn.ModuleList([CrossLayer(dim) for _ in range(3)])
        self.attn = nn.ModuleList([ListwiseAttention(dim, heads=4) for _ in range(2)])
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 64), nn.GELU(), nn.Linear(64, 1))

    def forward(self, user_feats, cand_ids):
        u = self.user_tower(user_feats)                      # [B, EMB]
        it = self.item_emb(cand_ids)                         # [B, C, EMB]
        for blk in self.item_blocks:
            it = blk(it)
        u = u.unsqueeze(1).expand_as(it)
        x0 = torch.cat([u, it, u * it], dim=-1)              # [B, C, 3*EMB]
        x = x0
        for layer in self.cross:
            x = layer(x0, x)
        for layer in self.attn:
            x = layer(x)
        return self.head(x).squeeze(-1)                      # [B, C]


class RerankService:
    def __init__(self, model, cfg: ServiceConfig):
        self.model = model.eval()
        self.cfg = cfg
        self.served = 0

    def _poll(self, stream):
        window = []
        for req in stream:
            window.append(req)
            if len(window) == self.cfg.poll_window:
                break
        return window

    def _to_device(self, window):
        feats = torch.from_numpy(np.stack([r.user_features for r in window]))
        cands = torch.from_numpy(np.stack([r.candidates for r in window]))
        return feats.to(DEVICE), cands.to(DEVICE)

    @torch.inference_mode()
    def _score(self, feats, cands):
        probs, idx = [], []
        for start in range(0, feats.shape[0], self.cfg.max_batch):
            end = start + self.cfg.max_batch
            logits = self.model(feats[start:end], cands[start:end])
            p = torch.softmax(logits / self.cfg.temperature, dim=-1)
            top_p, top_i = torch.topk(p, self.cfg.top_k, dim=-1)
            probs.append(top_p)
            idx.append(torch.gather(cands[start:end], 1, top_i))
        return torch.cat(probs), torch.cat(idx)

    def handle_window(self, window):
        feats, cands = self._to_device(window)
        top_p, top_items = self._score(feats, cands)
        top_p, top_items = top_p.cpu().numpy(), top_items.cpu().numpy()
        out = []
        for r, p, it in zip(window, top_p, top_items):
            out.append(Response(r.request_id, it.tolist(), p.tolist()))
        self.served += len(out)
        return out

    def serve(self, stream):
        while True:
            window = self._poll(stream)
            if not window:
                return
            yield from self.handle_window(window)


def build_model():
    torch.manual_seed(0)
    model = RerankModel()
    return model.to(DEVICE)


def main():
    model = build_model()
    service = RerankService(model, ServiceConfig())

    # warm-up (kernel selection, allocator) on a few requests
    for _ in service.serve(request_stream(128, seed=7)):
        pass
    if DEVICE == "cuda":
        torch.cuda.synchronize()

    t0 = time.perf_counter()
    checksum = 0.0
    top1 = 0.0
    n = 0
    for resp in service.serve(request_stream(N_REQUESTS)):
        checksum += sum(resp.scores)
        top1 += resp.scores[0]
        n += 1
    elapsed = time.perf_counter() - t0

    print(f"device={DEVICE} fixed={FIXED} requests={n}")
    print(f"checksum(sum top-{TOP_K} probs)={checksum:.3f} mean_top1={top1 / n:.6f}")
    print(f"elapsed_s={elapsed:.3f}")


if __name__ == "__main__":
    main()

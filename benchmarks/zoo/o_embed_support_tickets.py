"""Offline embedding job for support-ticket text.

Reads tokenised tickets from a set of shard "files", encodes each ticket with a
small pre-norm transformer encoder, mean-pools over real tokens and writes
L2-normalised embeddings (here: accumulated into an in-memory store and
summarised at the end, since the real sink is a vector DB).

Usage:
    python embed_support_tickets.py [--shards 6] [--batch-size 64]
"""
import argparse
import logging
import math
import time
from dataclasses import dataclass
from typing import Iterator, List

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

log = logging.getLogger("embed")

PAD_ID = 0
CLS_ID = 1


@dataclass
class EncoderConfig:
    vocab_size: int = 8000
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 256
    max_seq_len: int = 256


@dataclass
class Ticket:
    ticket_id: str
    token_ids: List[int]


# --------------------------------------------------------------------------- #
# Data
# --------------------------------------------------------------------------- #
def read_shard(shard_idx: int, records_per_shard: int, vocab_size: int,
               max_seq_len: int) -> Iterator[Ticket]:
    """Stand-in for reading one jsonl shard of pre-tokenised tickets.

    Ticket lengths follow a heavy-tailed distribution: most tickets are a
    couple of sentences, a few are pasted log dumps that hit the limit.
    """
    rng = np.random.default_rng(1000 + shard_idx)
    lengths = np.clip(rng.lognormal(mean=3.2, sigma=0.6, size=records_per_shard),
                      4, max_seq_len - 1).astype(np.int64)
    for i, n in enumerate(lengths):
        toks = rng.integers(2, vocab_size, size=int(n))
        yield Ticket(ticket_id=f"s{shard_idx:03d}-{i:06d}",
                     token_ids=[CLS_ID] + toks.tolist())


def iter_tickets(n_shards: int, records_per_shard: int, cfg: EncoderConfig) -> Iterator[Ticket]:
    for s in range(n_shards):
        log.debug("opening shard %d", s)
        yield from read_shard(s, records_per_shard, cfg.vocab_size, cfg.max_seq_len)


def batched(it: Iterator[Ticket], batch_size: int) -> Iterator[List[Ticket]]:
    buf: List[Ticket] = []
    for rec in it:
        buf.append(rec)
        if len(buf) == batch_size:
            yield buf
            buf = []
    if buf:
        yield buf


def collate(tickets: List[Ticket], max_seq_len: int, pad_to_longest: bool):
    """Truncate and pad a list of tickets into (ids, mask) tensors."""
    seqs = [t.token_ids[:max_seq_len] for t in tickets]
    target_len = max(len(s) for s in seqs) if pad_to_longest else max_seq_len  # PLANTED
    ids = torch.full((len(seqs), target_len), PAD_ID, dtype=torch.long)
    for row, s in enumerate(seqs):
        ids[row, :len(s)] = torch.tensor(s, dtype=torch.long)
    mask = ids.ne(PAD_ID)
    return ids, mask


# --------------------------------------------------------------------------- #
# Model
# --------------------------------------------------------------------------- #
class SelfAttention(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
        attn = scores.softmax(dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(B, T, D)
        return self.out(y)


class EncoderBlock(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(),
                                nn.Linear(cfg.d_ff, cfg.d_model))

    def forward(self, x, key_mask):
        x = x + self.attn(self.ln1(x), key_mask)
        return x + self.ff(self.ln2(x))


class TicketEncoder(nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=PAD_ID)
        self.pos = nn.Embedding(cfg.max_seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.tok(ids) + self.pos(pos)[None]
        for blk in self.blocks:
            x = blk(x, mask)
        x = self.ln_f(x)
        m = mask.unsqueeze(-1).to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1).clamp_min(1.0)
        return F.normalize(pooled, dim=-1)


# --------------------------------------------------------------------------- #
# Job
# --------------------------------------------------------------------------- #
class EmbeddingStore:
    """Collects embeddings; in production this flushes to the vector DB."""

    def __init__(self):
        self.ids: List[str] = []
        self.chunks: List[torch.Tensor] = []

    def add(self, ticket_ids, emb):
        self.ids.extend(ticket_ids)
        self.chunks.append(emb)

    def finalize(self) -> torch.Tensor:
        return torch.cat(self.chunks)


def run_job(args) -> None:
    torch.manual_seed(args.seed)
    cfg = EncoderConfig()
    model = TicketEncoder(cfg).eval()
    n_params = sum(p.numel() for p in model.parameters())
    log.info("encoder ready: %.2fM params", n_params / 1e6)

    store = EmbeddingStore()
    n_tokens = 0
    t0 = time.perf_counter()
    with torch.inference_mode():
        stream = iter_tickets(args.shards, args.records_per_shard, cfg)
        for b, batch in enumerate(batched(stream, args.batch_size)):
            ids, mask = collate(batch, cfg.max_seq_len, pad_to_longest=args.fixed)
            emb = model(ids, mask)
            store.add([t.ticket_id for t in batch], emb)
            n_tokens += int(mask.sum())
            if b % 50 == 0:
                log.debug("batch %d: %s", b, tuple(ids.shape))
    elapsed = time.perf_counter() - t0

    embs = store.finalize()
    # Cheap sanity metrics: checksum + how spread out the embedding cloud is.
    centroid = embs.mean(0)
    sample = embs[:: max(1, len(embs) // 1024)]
    sim = sample @ sample.T
    off_diag = (sim.sum() - sim.diagonal().sum()) / (len(sample) * (len(sample) - 1))
    log.info("embedded %d tickets (%d real tokens) in %.2fs -> %.0f tickets/s",
             len(store.ids), n_tokens, elapsed, len(store.ids) / elapsed)
    print(f"checksum={embs.abs().sum().item():.6f} |centroid|={centroid.norm().item():.6f} "
          f"mean_offdiag_cos={off_diag.item():.6f}")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--records-per-shard", type=int, default=400)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fixed", action="store_true",
                   help="use the corrected variant")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args()


if __name__ == "__main__":
    a = parse_args()
    logging.basicConfig(level=logging.DEBUG if a.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    run_job(a)

"""Streaming anomaly detector for multichannel sensor windows (kNN on embeddings).

`AnomalyService` embeds fixed-length sensor windows with a small 1-D conv
encoder, keeps a memory bank of embeddings of known-normal windows, and scores
each incoming window by the mean Euclidean distance to its k nearest bank
entries (a PatchCore / deep-kNN style detector).  The alert threshold is
calibrated on held-out normal windows.  Chunks of windows arrive from a
generator that simulates a plant's telemetry feed with occasional injected
faults (spikes, drifts, stuck sensors); the service emits alerts and a
per-fault-type detection summary.

Planted problem:
    `AnomalyService.knn_scores()` computes the distances to the memory bank by
    broadcasting `queries[:, None, :] - self.bank[None, :, :]`, squaring and
    summing over the feature axis.  For a chunk of 64 windows against a
    20k x 64 bank that materialises a (64, 20000, 64) float tensor (~330 MB)
    twice (difference and square) per chunk, so the service is bound by memory
    traffic and allocation instead of doing a small GEMM.

Fix (--fixed):
    Use `torch.cdist(queries, self.bank)`, which computes the same Euclidean
    distances through the matrix-multiply expansion without the 3-D
    intermediate.
"""
import argparse
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ServiceConfig:
    channels: int = 8
    window: int = 128
    embed_dim: int = 64
    bank_size: int = 20000
    k: int = 5
    chunk_size: int = 64
    num_chunks: int = 16
    anomaly_rate: float = 0.05
    threshold_quantile: float = 0.995
    seed: int = 0


def synth_normal(n, cfg: ServiceConfig, gen: torch.Generator):
    """Normal operation: per-channel sinusoids with random phase + noise."""
    t = torch.linspace(0, 1, cfg.window)
    freqs = torch.linspace(2.0, 9.0, cfg.channels).unsqueeze(1)
    phase = torch.rand(n, cfg.channels, 1, generator=gen) * 6.283
    amp = 1.0 + 0.1 * torch.randn(n, cfg.channels, 1, generator=gen)
    x = amp * torch.sin(6.283 * freqs * t + phase)
    return x + 0.15 * torch.randn(n, cfg.channels, cfg.window, generator=gen)


def inject_faults(x, cfg: ServiceConfig, gen: torch.Generator):
    n = x.shape[0]
    kind = torch.zeros(n, dtype=torch.long)
    is_bad = torch.rand(n, generator=gen) < cfg.anomaly_rate
    bad = is_bad.nonzero().squeeze(1)
    if bad.numel() == 0:
        return x, kind
    kind[bad] = torch.randint(1, 4, (bad.numel(),), generator=gen)
    ch = torch.randint(0, cfg.channels, (n,), generator=gen)
    rows = torch.arange(n)
    t = torch.linspace(0, 1, cfg.window)
    spike_pos = torch.randint(0, cfg.window, (n,), generator=gen)
    spike = F.one_hot(spike_pos, cfg.window).float() * 6.0
    drift = 3.0 * t.expand(n, -1)
    stuck = x[rows, ch, :1].expand(-1, cfg.window)
    x = x.clone()
    sel = rows[kind == 1]
    x[sel, ch[sel]] += spike[sel]
    sel = rows[kind == 2]
    x[sel, ch[sel]] += drift[sel]
    sel = rows[kind == 3]
    x[sel, ch[sel]] = stuck[sel]
    return x, kind


def telemetry_stream(cfg: ServiceConfig, gen: torch.Generator):
    for i in range(cfg.num_chunks):
        x = synth_normal(cfg.chunk_size, cfg, gen)
        x, kind = inject_faults(x, cfg, gen)
        sensor_ids = torch.randint(0, 500, (cfg.chunk_size,), generator=gen)
        yield {"chunk_id": i, "windows": x, "sensor_ids": sensor_ids, "fault_kind": kind}


class WindowEncoder(nn.Module):
    def __init__(self, cfg: ServiceConfig):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(cfg.channels, 32, 7, padding=3), nn.GELU(),
            nn.Conv1d(32, 64, 5, stride=2, padding=2), nn.GELU(),
            nn.Conv1d(64, 64, 5, stride=2, padding=2), nn.GELU(),
        )
        self.proj = nn.Linear(64 * 2, cfg.embed_dim)

    def forward(self, x):
        h = self.net(x)
        pooled = torch.cat([h.mean(-1), h.amax(-1)], dim=1)
        return self.proj(pooled)


class AnomalyService:
    def __init__(self, cfg: ServiceConfig, fixed: bool):
        self.cfg = cfg
        self.fixed = fixed
        self.gen = torch.Generator().manual_seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        self.encoder = WindowEncoder(cfg).eval()
        self.bank = None
        self.threshold = None

    @torch.inference_mode()
    def embed(self, windows):
        return self.encoder(windows)

    def build_bank(self):
        normal = synth_normal(self.cfg.bank_size, self.cfg, self.gen)
        embs = [self.embed(b) for b in normal.split(2048)]
        self.bank = torch.cat(embs)
        self.bank_mean = self.bank.mean(0)
        self.bank_std = self.bank.std(0).clamp(min=1e-4)
        self.bank = (self.bank - self.bank_mean) / self.bank_std

    @torch.inference_mode()
    def knn_scores(self, queries):
        queries = (queries - self.bank_mean) / self.bank_std
        if self.fixed:
            dist = torch.cdist(queries, self.bank)
        else:
            diff = queries[:, None, :] - self.bank[None, :, :]
            dist = (diff * diff).sum(-1).sqrt()  # PLANTED
        nearest = dist.topk(self.cfg.k, dim=1, largest=False).values
        return nearest.mean(1)

    def calibrate(self, n_holdout=512):
        holdout = synth_normal(n_holdout, self.cfg, self.gen)
        scores = torch.cat([self.knn_scores(self.embed(b))
                            for b in holdout.split(self.cfg.chunk_size)])
        self.threshold = torch.quantile(scores, self.cfg.threshold_quantile).item()

    def process(self, chunk):
        scores = self.knn_scores(self.embed(chunk["windows"]))
        flagged = scores > self.threshold
        alerts = [
            {"chunk": chunk["chunk_id"], "sensor": int(s), "score": round(float(v), 3)}
            for s, v in zip(chunk["sensor_ids"][flagged].tolist(), scores[flagged].tolist())
        ]
        return flagged, alerts

    def run(self, stream):
        tp = torch.zeros(4, dtype=torch.long)
        total = torch.zeros(4, dtype=torch.long)
        n_alerts = 0
        for chunk in stream:
            flagged, alerts = self.process(chunk)
            n_alerts += len(alerts)
            kind = chunk["fault_kind"]
            total += torch.bincount(kind, minlength=4)
            tp += torch.bincount(kind[flagged], minlength=4)
        return n_alerts, tp, total


def main():
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    cfg = ServiceConfig()
    t0 = time.perf_counter()
    svc = AnomalyService(cfg, args.fixed)
    svc.build_bank()
    svc.calibrate()
    print(f"bank {tuple(svc.bank.shape)}  threshold {svc.threshold:.3f}")
    stream = telemetry_stream(cfg, torch.Generator().manual_seed(cfg.seed + 1))
    n_alerts, tp, total = svc.run(stream)
    names = ["normal", "spike", "drift", "stuck"]
    for i, name in enumerate(names):
        print(f"{name:>6}: flagged {tp[i].item():4d} / {total[i].item():4d}")
    print(f"alerts {n_alerts}  time {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()

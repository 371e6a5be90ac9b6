"""Vibration-sensor anomaly detection service.

Windows of multichannel accelerometer data are turned into spectral/statistical
embeddings; a window is anomalous if it is far (k-NN distance) from a bank of
embeddings recorded while the machine was known to be healthy.
"""
import argparse
import math
import time

import torch

FS = 2000.0  # Hz


def simulate_sensor(n_windows, n_channels=3, win=512, fault_rate=0.0, seed=0):
    """Healthy machine: shaft harmonics + broadband noise. Faults: bearing impacts."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(win) / FS
    rpm = 1500 + 300 * torch.rand(n_windows, 1, 1, generator=g)
    f_shaft = rpm / 60.0
    phase = 2 * math.pi * torch.rand(n_windows, n_channels, 1, generator=g)
    gains = 0.5 + torch.rand(n_windows, n_channels, 1, generator=g)
    x = gains * (torch.sin(2 * math.pi * f_shaft * t + phase) + 0.4 * torch.sin(4 * math.pi * f_shaft * t + 2 * phase))
    x = x + 0.3 * torch.randn(n_windows, n_channels, win, generator=g)
    labels = torch.rand(n_windows, generator=g) < fault_rate
    if labels.any():
        idx = labels.nonzero().squeeze(1)
        f_fault = 3.57 * f_shaft[idx]  # BPFO-like impact frequency
        impacts = (torch.sin(2 * math.pi * f_fault * t) > 0.97).float()
        ring = torch.sin(2 * math.pi * 310.0 * t) * torch.exp(-t * 60.0)
        kernel = ring.flip(0).view(1, 1, -1)
        burst = torch.nn.functional.conv1d(impacts, kernel, padding=win - 1)[..., :win]
        x[idx] += 0.6 * burst
    return x, labels


class SensorAnomalyService:
    def __init__(self, n_bands=16, k=5, query_chunk=64, fixed=False):
        self.n_bands = n_bands
        self.k = k
        self.query_chunk = query_chunk
        self.fixed = fixed
        self.bank = None
        self.mu = self.sigma = None
        self.threshold = None

    # ---------------------------------------------------------------- features
    def embed(self, windows):
        w = windows - windows.mean(-1, keepdim=True)
        spec = torch.fft.rfft(w * torch.hann_window(w.shape[-1]), dim=-1).abs() ** 2
        bands = spec[..., 1:].unflatten(-1, (self.n_bands, -1)).sum(-1)  # (N, C, bands)
        log_bands = torch.log1p(bands)
        rms = w.pow(2).mean(-1).sqrt()
        kurt = (w.pow(4).mean(-1) / (w.pow(2).mean(-1) ** 2 + 1e-8))
        crest = w.abs().amax(-1) / (rms + 1e-8)
        feats = torch.cat([log_bands.flatten(1), rms, kurt.log(), crest], dim=1)
        return feats

    def _normalise(self, feats):
        return (feats - self.mu) / self.sigma

    # ---------------------------------------------------------------- fitting
    def fit(self, healthy_windows, calib_windows, quantile=0.995):
        feats = self.embed(healthy_windows)
        self.mu, self.sigma = feats.mean(0), feats.std(0) + 1e-6
        self.bank = self._normalise(feats).contiguous()
        calib_scores = self.score(calib_windows)
        self.threshold = torch.quantile(calib_scores, quantile).item()
        return self

    # ---------------------------------------------------------------- scoring
    def _knn_distance(self, q):
        if self.fixed:
            d2 = torch.cdist(q, self.bank).pow(2)
        else:
            d2 = ((q[:, None, :] - self.bank[None, :, :]) ** 2).sum(-1)  # PLANTED
        nearest = d2.topk(self.k, dim=1, largest=False).values
        return nearest.clamp_min(0).sqrt().mean(1)

    def score(self, windows):
        q = self._normalise(self.embed(windows))
        out = [self._knn_distance(chunk) for chunk in q.split(self.query_chunk)]
        return torch.cat(out)

    def detect(self, windows):
        scores = self.score(windows)
        return scores > self.threshold, scores


def stream(n_batches, batch_size, fault_rate, seed):
    for b in range(n_batches):
        yield simulate_sensor(batch_size, fault_rate=fault_rate, seed=seed + b)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bank-size", type=int, default=16000)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()

    t0 = time.time()
    healthy, _ = simulate_sensor(args.bank_size, seed=1)
    calib, _ = simulate_sensor(512, seed=2)
    service = SensorAnomalyService(fixed=args.fixed).fit(healthy, calib)
    print(f"bank: {tuple(service.bank.shape)}  threshold: {service.threshold:.3f}")

    tp = fp = fn = tn = 0
    for windows, labels in stream(args.batches, args.batch_size, fault_rate=0.05, seed=100):
        flags, _ = service.detect(windows)
        tp += (flags & labels).sum().item()
        fp += (flags & ~labels).sum().item()
        fn += (~flags & labels).sum().item()
        tn += (~flags & ~labels).sum().item()
    precision = tp / max(tp + fp, 1)
    recall = tp / max(tp + fn, 1)
    print(f"windows scored: {tp + fp + fn + tn}  alarms: {tp + fp}  precision {precision:.3f}  recall {recall:.3f}")
    print(f"elapsed {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()

"""Online anomaly detection over a multi-sensor feed.

Readings arrive in small batches from a (simulated) plant historian. A ring
buffer turns them into overlapping windows, a small dense autoencoder
scores each window by reconstruction error, and the model keeps adapting to
slow drift by training on recent windows it considered normal. The alert
threshold follows an exponentially weighted mean/variance of recent scores.
"""
import argparse
import logging
import math
import time
from collections import deque

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

log = logging.getLogger("streamad")


# --------------------------------------------------------------------------- feed
def sensor_stream(n_readings, batch_len, n_sensors, seed=0, anomaly_rate=2e-3):
    """Yield (readings[batch_len, n_sensors], is_anomaly[batch_len]) until n_readings.

    Each sensor is a mix of a daily cycle, a slow drift and coloured noise;
    anomalies (spikes, level shifts, noise bursts) are planted at random.
    """
    rng = np.random.default_rng(seed)
    phase = rng.uniform(0, 2 * np.pi, n_sensors)
    period = rng.uniform(180, 420, n_sensors)
    gain = rng.uniform(0.5, 2.0, n_sensors)
    mix = rng.normal(0, 0.3, (n_sensors, n_sensors)) + np.eye(n_sensors)
    noise_state = np.zeros(n_sensors)
    active = []  # [kind, sensor, remaining, magnitude]
    t = 0
    while t < n_readings:
        tt = np.arange(t, t + batch_len)[:, None]
        clean = (gain * np.sin(2 * np.pi * tt / period + phase) + 1e-5 * tt) @ mix.T
        innov = rng.normal(0, 0.15, (batch_len, n_sensors))
        onset = rng.random(batch_len) < anomaly_rate
        out = np.empty((batch_len, n_sensors), dtype=np.float32)
        truth = np.zeros(batch_len, dtype=bool)
        for i in range(batch_len):
            noise_state = 0.8 * noise_state + innov[i]
            x = clean[i] + noise_state
            if onset[i]:
                kind = rng.choice(["spike", "shift", "burst"])
                dur = {"spike": 4, "shift": 48, "burst": 48}[kind]
                mag = {"spike": 6.0, "shift": 3.0, "burst": 1.5}[kind] * rng.uniform(0.8, 1.5)
                active.append([kind, rng.integers(n_sensors), dur, rng.choice([-1, 1]) * mag])
            for a in active:
                kind, s, _, mag = a
                x[s] += rng.normal(0, abs(mag)) if kind == "burst" else mag
                a[2] -= 1
            truth[i] = bool(active)
            active = [a for a in active if a[2] > 0]
            out[i] = x
        t += batch_len
        yield out, truth


class WindowBuffer:
    """Fixed-size ring of the latest readings; emits a window every `stride` readings."""

    def __init__(self, window, stride, n_sensors):
        self.window, self.stride = window, stride
        self.data = np.zeros((window, n_sensors), dtype=np.float32)
        self.flags = np.zeros(window, dtype=bool)
        self.pos = self.filled = self.since_emit = 0

    def push(self, readings, truth):
        out = []
        for x, y in zip(readings, truth):
            self.data[self.pos], self.flags[self.pos] = x, y
            self.pos = (self.pos + 1) % self.window
            self.filled = min(self.filled + 1, self.window)
            self.since_emit += 1
            if self.filled == self.window and self.since_emit >= self.stride:
                self.since_emit = 0
                chrono = np.roll(self.data, -self.pos, axis=0)  # oldest reading first
                out.append((np.ascontiguousarray(chrono.T), bool(self.flags.any())))
        return out


# --------------------------------------------------------------------------- model
class WindowAutoencoder(nn.Module):
    """Dense autoencoder over a flattened (sensors x window) patch."""

    def __init__(self, n_sensors, window, hidden=64, latent=16):
        super().__init__()
        d = n_sensors * window
        self.encoder = nn.Sequential(nn.Flatten(), nn.Linear(d, hidden), nn.GELU(),
                                     nn.Linear(hidden, latent))
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.GELU(), nn.Linear(hidden, d),
                                     nn.Unflatten(1, (n_sensors, window)))

    def forward(self, x):
        return self.decoder(self.encoder(x))


class RunningNorm:
    """Per-sensor EWMA mean/variance used to standardise incoming windows."""

    def __init__(self, n_sensors, alpha=0.01):
        self.alpha = alpha
        self.mean = torch.zeros(n_sensors, 1)
        self.std = torch.ones(n_sensors, 1)
        self.count = 0

    def update(self, w):
        v, m = torch.var_mean(w, dim=(0, 2))
        a = 1.0 if self.count == 0 else self.alpha
        self.mean = torch.lerp(self.mean, m[:, None], a)
        self.std = torch.lerp(self.std.square(), v[:, None], a).sqrt_()
        self.count += 1

    def __call__(self, w):
        return (w - self.mean) / self.std


class AdaptiveThreshold:
    """mean + k * std of recent normal scores, exponentially forgetting."""

    def __init__(self, k=4.0, alpha=0.02, warmup=200, clip=3.0):
        self.k, self.alpha, self.warmup, self.clip = k, alpha, warmup, clip
        self.mu, self.var, self.n = 0.0, 1.0, 0

    @property
    def value(self):
        return self.mu + self.k * math.sqrt(self.var)

    def ready(self):
        return self.n >= self.warmup

    def update(self, score):
        if self.ready():  # winsorise so slow-building anomalies cannot drag the threshold up
            score = min(score, self.mu + self.clip * math.sqrt(self.var))
        self.n += 1
        a = max(self.alpha, 1.0 / self.n)
        d = score - self.mu
        self.mu += a * d
        self.var = (1 - a) * (self.var + a * d * d)


class OnlineLearner:
    def __init__(self, model, lr, replay, batch_size, steps, seed):
        self.model = model
        self.opt = torch.optim.Adam(model.parameters(), lr=lr)
        self.replay = deque(maxlen=replay)
        self.batch_size, self.steps = batch_size, steps
        self.gen = torch.Generator().manual_seed(seed)
        self.last_loss = float("nan")

    def remember(self, w):
        self.replay.append(w)

    def update(self):
        if len(self.replay) < self.batch_size:
            return
        bank = torch.stack(list(self.replay))
        self.model.train()
        for _ in range(self.steps):
            idx = torch.randint(len(bank), (self.batch_size,), generator=self.gen)
            x = bank[idx]
            loss = F.mse_loss(self.model(x), x)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
        self.last_loss = loss.item()
        self.model.eval()


# --------------------------------------------------------------------------- main
def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--readings", type=int, default=40_000)
    p.add_argument("--batch-len", type=int, default=16, help="readings per feed message")
    p.add_argument("--sensors", type=int, default=8)
    p.add_argument("--window", type=int, default=64)
    p.add_argument("--stride", type=int, default=4)
    p.add_argument("--update-every", type=int, default=32, help="windows between online updates")
    p.add_argument("--train-steps", type=int, default=2)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--k", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-level", default="INFO", help="DEBUG traces every scored window")
    p.add_argument("--fixed", action="store_true")
    return p.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(1)  # one feed per core in production
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(message)s")
    torch.manual_seed(args.seed)

    model = WindowAutoencoder(args.sensors, args.window).eval()
    learner = OnlineLearner(model, args.lr, replay=512, batch_size=32,
                            steps=args.train_steps, seed=args.seed)
    norm = RunningNorm(args.sensors)
    thresh = AdaptiveThreshold(k=args.k)
    buf = WindowBuffer(args.window, args.stride, args.sensors)

    tp = fp = fn = tn = 0
    n_windows, alerts = 0, []
    t0 = time.perf_counter()
    for b, (readings, truth) in enumerate(sensor_stream(args.readings, args.batch_len,
                                                        args.sensors, seed=args.seed)):
        emitted = buf.push(readings, truth)
        if not emitted:
            continue
        x = torch.from_numpy(np.stack([w for w, _ in emitted]))
        labels = [y for _, y in emitted]
        if norm.count == 0:
            norm.update(x)
        xn = norm(x)
        with torch.no_grad():
            z = model.encoder(xn)
            recon = model.decoder(z)
        sq_err = (recon - xn).square()
        per_sensor, per_step = sq_err.mean(dim=2), sq_err.mean(dim=1)
        scores = per_sensor.amax(dim=1)
        normal = []
        for j, (s, y) in enumerate(zip(scores.tolist(), labels)):
            flagged = thresh.ready() and s > thresh.value
            if args.fixed:
                log.debug("msg %d window %d: score=%.4f thr=%.4f per_sensor=%s per_step=%s latent=%s",
                          b, n_windows, s, thresh.value, per_sensor[j], per_step[j], z[j])
            else:
                log.debug(f"msg {b} window {n_windows}: score={s:.4f} thr={thresh.value:.4f} "  # PLANTED
                          f"per_sensor={per_sensor[j]} per_step={per_step[j]} latent={z[j]}")
            if thresh.ready():
                tp += flagged and y
                fp += flagged and not y
                fn += (not flagged) and y
                tn += (not flagged) and not y
            if flagged:
                sensor, step = int(per_sensor[j].argmax()), int(per_step[j].argmax())
                alerts.append((n_windows, s, sensor, step))
                if len(alerts) <= 5 or len(alerts) % 100 == 0:
                    log.info("ALERT window %d score %.3f > %.3f (sensor %d, peak at t-%d)",
                             n_windows, s, thresh.value, sensor, args.window - 1 - step)
            else:
                thresh.update(s)
                normal.append(j)
                learner.remember(xn[j])
            n_windows += 1
            if n_windows % args.update_every == 0:
                learner.update()
        if normal:
            norm.update(x[normal])

    elapsed = time.perf_counter() - t0
    precision = tp / max(tp + fp, 1)
    recall = tp / max(tp + fn, 1)
    f1 = 2 * precision * recall / max(precision + recall, 1e-12)
    print(f"windows scored: {n_windows}  alerts: {len(alerts)}  last train loss: {learner.last_loss:.4f}")
    print(f"tp={tp} fp={fp} fn={fn} tn={tn}")
    print(f"precision={precision:.3f} recall={recall:.3f} f1={f1:.3f}  threshold={thresh.value:.4f}")
    for w, s, sensor, step in sorted(alerts, key=lambda a: -a[1])[:5]:
        print(f"  top alert: window {w:6d}  score {s:8.3f}  sensor {sensor}  peak at t-{args.window - 1 - step}")
    print(f"throughput: {n_windows / elapsed:.0f} windows/s")


if __name__ == "__main__":
    main()

"""Streaming activity recognition: generator stages (source -> windows -> batches) feed a 1D CNN."""
import argparse
import time

import numpy as np
import torch
import torch.nn as nn

WIN = 128
CHANNELS = 6
N_CLASSES = 5


def sensor_stream(n_sessions, rng):
    """Yield (readings[T, C] float32 ndarray, label) per recording session."""
    t = np.arange(2048, dtype=np.float32) / 50.0
    for _ in range(n_sessions):
        label = int(rng.integers(N_CLASSES))
        freq = 0.5 + label * 0.7
        phase = rng.uniform(0, 2 * np.pi, size=CHANNELS).astype(np.float32)
        sig = np.sin(2 * np.pi * freq * t[:, None] + phase[None, :])
        sig += 0.3 * rng.standard_normal(sig.shape).astype(np.float32)
        yield sig.astype(np.float32), label


def sliding_windows(stream, win=WIN, hop=64):
    for sig, label in stream:
        for start in range(0, len(sig) - win + 1, hop):
            yield sig[start:start + win], label


def normalize(windows):
    for w, label in windows:
        mu = w.mean(axis=0, keepdims=True)
        sd = w.std(axis=0, keepdims=True) + 1e-5
        yield (w - mu) / sd, label


def batched(windows, bs, fixed):
    buf, labels = [], []
    for w, label in windows:
        buf.append(w)
        labels.append(label)
        if len(buf) == bs:
            if fixed:
                x = torch.from_numpy(np.stack(buf))
            else:
                x = torch.tensor([[list(row) for row in w] for w in buf], dtype=torch.float32)  # PLANTED
            yield x.transpose(1, 2).contiguous(), torch.tensor(labels)
            buf, labels = [], []


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(CHANNELS, 32, 7, padding=3), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(32, 32, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(32, 64, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(64, N_CLASSES))

    def forward(self, x):
        return self.net(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--sessions", type=int, default=650)
    args = ap.parse_args()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = ConvNet()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    loss_fn = nn.CrossEntropyLoss()
    t0 = time.time()
    pipe = batched(normalize(sliding_windows(sensor_stream(args.sessions, rng))), 64, args.fixed)
    correct = seen = 0
    for step, (x, y) in enumerate(pipe):
        logits = model(x)
        loss = loss_fn(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        correct += (logits.argmax(1) == y).sum().item()
        seen += len(y)
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.3f} running acc {correct / seen:.3f}")
    print(f"{step + 1} steps in {time.time() - t0:.2f}s")


if __name__ == "__main__":
    main()

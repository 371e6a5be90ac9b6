"""Train a small CNN on log-mel spectrograms of synthetic tone clips."""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--fixed", action="store_true")
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

if args.fixed:
    torch.set_default_dtype(torch.float32)
else:
    torch.set_default_dtype(torch.float64)  # PLANTED

torch.manual_seed(0)
rng = np.random.default_rng(0)

SAMPLE_RATE = 16000
CLIP_SECONDS = 1.0
N_FFT = 512
HOP = 160
N_MELS = 64
N_CLASSES = 8


def hz_to_mel(f):
    return 2595.0 * math.log10(1.0 + f / 700.0)


def mel_to_hz(m):
    return 700.0 * (10 ** (m / 2595.0) - 1.0)


def make_mel_filterbank(n_fft, n_mels, sr):
    n_freqs = n_fft // 2 + 1
    freqs = torch.linspace(0, sr / 2, n_freqs)
    mel_pts = torch.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2)
    hz_pts = torch.tensor([mel_to_hz(m.item()) for m in mel_pts])
    lower = hz_pts[:-2].unsqueeze(1)
    center = hz_pts[1:-1].unsqueeze(1)
    upper = hz_pts[2:].unsqueeze(1)
    up = (freqs - lower) / (center - lower)
    down = (upper - freqs) / (upper - center)
    return torch.clamp(torch.minimum(up, down), min=0.0)


class LogMelFrontend(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(N_FFT))
        self.register_buffer("mel_fb", make_mel_filterbank(N_FFT, N_MELS, SAMPLE_RATE))

    def forward(self, wav):
        spec = torch.stft(wav, N_FFT, hop_length=HOP, window=self.window,
                          return_complex=True)
        power = spec.abs().pow(2)
        mel = torch.matmul(self.mel_fb, power)
        return torch.log(mel + 1e-6).unsqueeze(1)


class ToneCNN(nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        self.frontend = LogMelFrontend()
        self.norm = nn.BatchNorm2d(1)
        self.conv1 = nn.Conv2d(1, 24, 3, padding=1)
        self.conv2 = nn.Conv2d(24, 48, 3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(48, 64, 3, stride=2, padding=1)
        self.head = nn.Linear(64, n_classes)

    def forward(self, wav):
        x = self.norm(self.frontend(wav))
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x))
        x = x.mean(dim=(2, 3))
        return self.head(x)


def synth_clips(n_clips):
    n_samples = int(SAMPLE_RATE * CLIP_SECONDS)
    t = np.arange(n_samples) / SAMPLE_RATE
    labels = rng.integers(0, N_CLASSES, size=n_clips)
    base_freqs = 300.0 * (1.35 ** np.arange(N_CLASSES))
    clips = np.empty((n_clips, n_samples))
    for i, lab in enumerate(labels):
        f0 = base_freqs[lab] * rng.uniform(0.97, 1.03)
        amp = rng.uniform(0.3, 1.0)
        tone = amp * np.sin(2 * np.pi * f0 * t) + 0.3 * amp * np.sin(4 * np.pi * f0 * t)
        clips[i] = tone + 0.2 * rng.standard_normal(n_samples)
    wav = torch.tensor(clips, dtype=torch.get_default_dtype())
    return wav, torch.from_numpy(labels).long()


def sgd_step(params, velocities, lr=0.05, momentum=0.9):
    with torch.no_grad():
        for p, v in zip(params, velocities):
            v.mul_(momentum).add_(p.grad)
            p.sub_(lr * v)
            p.grad = None


def evaluate(model, wav, labels, batch_size=64):
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(wav), batch_size):
            logits = model(wav[start:start + batch_size])
            correct += (logits.argmax(1) == labels[start:start + batch_size]).sum().item()
    model.train()
    return correct / len(wav)


def main():
    train_wav, train_y = synth_clips(144)
    test_wav, test_y = synth_clips(64)
    model = ToneCNN(N_CLASSES)
    params = list(model.parameters())
    velocities = [torch.zeros_like(p) for p in params]
    batch_size = 32

    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        perm = torch.randperm(len(train_wav))
        total_loss = 0.0
        for start in range(0, len(train_wav), batch_size):
            idx = perm[start:start + batch_size]
            logits = model(train_wav[idx])
            loss = F.cross_entropy(logits, train_y[idx])
            loss.backward()
            sgd_step(params, velocities)
            total_loss += loss.item() * len(idx)
        acc = evaluate(model, test_wav, test_y)
        print(f"epoch {epoch}: loss {total_loss / len(train_wav):.4f}  test acc {acc:.3f}")
    print(f"train time {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()

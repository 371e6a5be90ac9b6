"""Sound-event classification: synthetic 1 s clips -> log-mel features -> small CNN.

Transforms are plain callables chained by Compose and applied inside the Dataset.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--fixed", action="store_true")
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

SR = 22050
CLIP = SR  # one second clips
N_CLASSES = 8


def hz_to_mel(f):
    return 2595.0 * torch.log10(1.0 + f / 700.0)


def mel_to_hz(m):
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


def mel_filterbank(sr, n_fft, n_mels, fmin=0.0, fmax=None):
    """Slaney-normalised triangular filters, shape (n_mels, n_fft // 2 + 1)."""
    fmax = fmax or sr / 2
    fft_freqs = torch.linspace(0, sr / 2, n_fft // 2 + 1, dtype=torch.float64)
    mel_lo, mel_hi = hz_to_mel(torch.tensor([fmin, fmax], dtype=torch.float64))
    mel_pts = mel_to_hz(torch.linspace(float(mel_lo), float(mel_hi), n_mels + 2, dtype=torch.float64))
    fdiff = mel_pts[1:] - mel_pts[:-1]
    ramps = mel_pts[:, None] - fft_freqs[None, :]
    weights = torch.zeros(n_mels, len(fft_freqs), dtype=torch.float64)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = torch.clamp(torch.minimum(lower, upper), min=0.0)
    enorm = 2.0 / (mel_pts[2:n_mels + 2] - mel_pts[:n_mels])
    return (weights * enorm[:, None]).float()


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class RandomGain:
    def __init__(self, low_db=-6.0, high_db=6.0):
        self.low_db, self.high_db = low_db, high_db

    def __call__(self, wav):
        db = torch.empty(1).uniform_(self.low_db, self.high_db)
        return wav * (10.0 ** (db / 20.0))


class PreEmphasis:
    def __init__(self, coef=0.97):
        self.coef = coef

    def __call__(self, wav):
        return torch.cat([wav[:1], wav[1:] - self.coef * wav[:-1]])


class MelSpectrogram:
    def __init__(self, sr=SR, n_fft=2048, hop=512, n_mels=128, fmin=20.0, fmax=8000.0):
        self.sr, self.n_fft, self.hop, self.n_mels = sr, n_fft, hop, n_mels
        self.fmin, self.fmax = fmin, fmax
        self.window = torch.hann_window(n_fft)
        self.fb = mel_filterbank(sr, n_fft, n_mels, fmin, fmax) if args.fixed else None

    def __call__(self, wav):
        spec = torch.stft(wav, self.n_fft, self.hop, window=self.window,
                          center=True, return_complex=True)
        power = spec.real ** 2 + spec.imag ** 2
        fb = self.fb if self.fb is not None else mel_filterbank(self.sr, self.n_fft, self.n_mels, self.fmin, self.fmax)  # PLANTED
        return fb @ power


class LogCompress:
    def __init__(self, eps=1e-6):
        self.eps = eps

    def __call__(self, mel):
        return torch.log(mel + self.eps)


class InstanceNorm:
    def __call__(self, feat):
        return (feat - feat.mean()) / (feat.std() + 1e-5)


class SyntheticEvents(Dataset):
    """Each class is a short chirp pattern with its own pitch contour plus noise."""

    def __init__(self, n, transform, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, N_CLASSES, (n,), generator=g)
        self.transform = transform
        t = torch.arange(CLIP) / SR
        templates = []
        for y in range(N_CLASSES):
            f0 = 200.0 + 90.0 * y
            sweep = f0 + 300.0 * torch.sin(2 * math.pi * (0.5 + 0.25 * y) * t)
            templates.append(torch.sin(2 * math.pi * torch.cumsum(sweep, 0) / SR))
        shifts = torch.randint(0, CLIP, (n,), generator=g).tolist()
        self.wavs = torch.stack([torch.roll(templates[y], s) for y, s in zip(self.labels.tolist(), shifts)])
        self.wavs.mul_(0.5).add_(torch.randn(n, CLIP, generator=g), alpha=0.3)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.transform(self.wavs[i]), int(self.labels[i])


class EventNet(nn.Module):
    """Temporal conv net: mel bins are channels, convolution runs over frames."""

    def __init__(self, n_mels=128, n_classes=N_CLASSES, width=64):
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, width, 3, padding=1)
        self.conv2 = nn.Conv1d(width, width, 3, stride=2, padding=1)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, n_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.head(self.norm(x.mean(dim=2)))


def main():
    torch.manual_seed(0)
    train_tf = Compose([RandomGain(), PreEmphasis(), MelSpectrogram(), LogCompress(), InstanceNorm()])
    eval_tf = Compose([PreEmphasis(), MelSpectrogram(), LogCompress(), InstanceNorm()])
    train_ds = SyntheticEvents(700, train_tf, seed=1)
    val_ds = SyntheticEvents(300, eval_tf, seed=2)
    train_dl = DataLoader(train_ds, batch_size=32, shuffle=True)
    val_dl = DataLoader(val_ds, batch_size=64)

    model = EventNet()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        tot, n = 0.0, 0
        for x, y in train_dl:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(y)
            n += len(y)
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in val_dl:
                correct += (model(x).argmax(1) == y).sum().item()
        print(f"epoch {epoch}: train loss {tot / n:.4f}  val acc {correct / len(val_ds):.3f}")
    print(f"elapsed {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()

"""Environmental-sound classifier on 30 s field recordings.

Train on random 1 s crops (log-mel, per-utterance CMN, SpecAugment), validate
on centre crops, and finally score whole clips with the fully-convolutional CNN.

The recordings are synthesised (harmonic "machine" tones with amplitude
modulation buried in noise) so the script is self-contained.

    python field_audio_cnn.py           # as in the training repo
    python field_audio_cnn.py --fixed   # crop the waveform before featurising
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SAMPLE_RATE = 16000
CLIP_SECONDS = 30.0
CROP_SECONDS = 1.0
N_FFT = 400          # 25 ms window
HOP = 160            # 10 ms hop
N_MELS = 64
N_CLASSES = 8


# --------------------------------------------------------------------------
# synthetic data
# --------------------------------------------------------------------------
def synthesise_recordings(n_clips, seed):
    g = torch.Generator().manual_seed(seed)
    n_samples = int(SAMPLE_RATE * CLIP_SECONDS)
    reps = int(CLIP_SECONDS)
    t = torch.arange(SAMPLE_RATE, dtype=torch.float32) / SAMPLE_RATE  # 1 s; all rates are integer Hz
    labels = torch.randint(0, N_CLASSES, (n_clips,), generator=g)
    f0 = torch.round(180.0 * 1.32 ** labels.float() * (1 + 0.03 * torch.randn(n_clips, generator=g)))
    am_rate = torch.tensor([2.0, 3.0, 5.0, 7.0])[labels % 4]
    phase = 2 * math.pi * torch.rand(n_clips, 1, generator=g)
    base = 2 * math.pi * f0[:, None] * t + phase
    s, c = torch.sin(base), torch.cos(base)
    h2 = torch.where(labels % 2 == 0, 1.0, 0.2)[:, None]
    h3 = torch.where(labels >= 4, 0.35, 0.0)[:, None]
    tone = s * (1 + h2 * c + h3 * (3 - 4 * s * s))
    tone *= 0.6 + 0.4 * torch.sin(2 * math.pi * am_rate[:, None] * t)
    snr = 0.4 + 1.2 * torch.rand(n_clips, generator=g)
    noise_bank = torch.randn(16, n_samples + SAMPLE_RATE, generator=g)
    rows = torch.randint(0, 16, (n_clips,), generator=g).tolist()
    offs = torch.randint(0, SAMPLE_RATE, (n_clips,), generator=g).tolist()
    waves = torch.empty(n_clips, n_samples, dtype=torch.int16)
    for i in range(n_clips):
        clip = noise_bank[rows[i], offs[i]:offs[i] + n_samples] * snr[i]
        clip += tone[i].repeat(reps)
        waves[i] = clip.mul_(2500.0).clamp_(-32767, 32767)
    return waves, labels


# --------------------------------------------------------------------------
# feature extraction
# --------------------------------------------------------------------------
def mel_filterbank(n_fft, n_mels, sr, fmin=50.0, fmax=None):
    fmax = fmax or sr / 2
    hz_to_mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)
    mel_to_hz = lambda m: 700.0 * (10 ** (m / 2595.0) - 1.0)
    mels = np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2)
    hz = mel_to_hz(mels)
    bins = np.fft.rfftfreq(n_fft, 1.0 / sr)
    fb = np.zeros((n_mels, len(bins)), dtype=np.float32)
    for m in range(1, n_mels + 1):
        lo, c, hi = hz[m - 1], hz[m], hz[m + 1]
        up = (bins - lo) / (c - lo)
        down = (hi - bins) / (hi - c)
        fb[m - 1] = np.maximum(0.0, np.minimum(up, down))
    return torch.from_numpy(fb)


class LogMel:
    """waveform (..., T) -> log-mel spectrogram (..., n_mels, frames), no centre padding."""

    def __init__(self):
        self.window = torch.hann_window(N_FFT)
        self.fb = mel_filterbank(N_FFT, N_MELS, SAMPLE_RATE)

    @staticmethod
    def n_frames(n_samples):
        return 1 + (n_samples - N_FFT) // HOP

    def __call__(self, wav):
        spec = torch.stft(wav, N_FFT, HOP, window=self.window, center=False,
                          return_complex=True)
        power = spec.real.square() + spec.imag.square()
        return torch.log(torch.clamp(self.fb @ power, min=1e-6))


# --------------------------------------------------------------------------
# dataset
# --------------------------------------------------------------------------
class FieldRecordings(Dataset):
    """int16 recordings -> (1, n_mels, frames) features.

    mode="train": random 1 s crop + SpecAugment
    mode="val":   centre 1 s crop
    mode="clip":  the whole recording (clip-level evaluation)
    """

    def __init__(self, waves, labels, mode, fixed=False):
        self.waves = waves
        self.labels = labels
        self.mode = mode
        self.fixed = fixed
        self.logmel = LogMel()
        self.crop_frames = LogMel.n_frames(int(SAMPLE_RATE * CROP_SECONDS))

    def __len__(self):
        return len(self.labels)

    def window_features(self, wav, start):
        """Log-mel frames [start, start + crop_frames) of the recording."""
        if self.fixed:
            seg = wav[start * HOP:(start + self.crop_frames - 1) * HOP + N_FFT]
            return self.logmel(seg)
        return self.logmel(wav)[:, start:start + self.crop_frames]  # PLANTED

    def spec_augment(self, feats):
        n_mels, n_frames = feats.shape
        f_w = int(torch.randint(0, 9, ()))
        f_0 = int(torch.randint(0, n_mels - f_w, ()))
        t_w = int(torch.randint(0, 13, ()))
        t_0 = int(torch.randint(0, n_frames - t_w, ()))
        feats[f_0:f_0 + f_w, :] = 0.0
        feats[:, t_0:t_0 + t_w] = 0.0
        return feats

    def __getitem__(self, idx):
        wav = self.waves[idx].float() / 32768.0
        label = self.labels[idx]
        total_frames = LogMel.n_frames(wav.numel())
        if self.mode == "clip":
            feats = self.logmel(wav)
        elif self.mode == "val":
            feats = self.window_features(wav, (total_frames - self.crop_frames) // 2)
        else:
            start = int(torch.randint(0, total_frames - self.crop_frames + 1, ()))
            feats = self.window_features(wav, start)
        feats = feats - feats.mean(dim=1, keepdim=True)   # per-utterance CMN
        if self.mode == "train":
            feats = self.spec_augment(feats)
        return feats.unsqueeze(0), label


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------
def conv_block(cin, cout, pool):
    layers = [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
    if pool:
        layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers)


class SoundCNN(nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        self.features = nn.Sequential(
            conv_block(1, 8, pool=True),
            conv_block(8, 16, pool=True),
            conv_block(16, 32, pool=True),
            conv_block(32, 48, pool=False),
        )
        self.dropout = nn.Dropout(0.2)
        self.head = nn.Linear(48, n_classes)

    def forward(self, x):
        h = self.features(x)
        h = h.mean(dim=(2, 3))
        return self.head(self.dropout(h))


# --------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------
def evaluate(model, loader):
    model.eval()
    correct, total, loss_sum = 0, 0, 0.0
    with torch.no_grad():
        for feats, labels in loader:
            logits = model(feats)
            loss_sum += F.cross_entropy(logits, labels, reduction="sum")
            correct += (logits.argmax(1) == labels).sum()
            total += labels.numel()
    model.train()
    return float(loss_sum) / total, float(correct) / total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=5e-3)
    args = parser.parse_args()

    torch.manual_seed(0)
    waves, labels = synthesise_recordings(320, seed=1)
    n_train = 288
    train_set = FieldRecordings(waves[:n_train], labels[:n_train], "train", fixed=args.fixed)
    val_set = FieldRecordings(waves[n_train:], labels[n_train:], "val", fixed=args.fixed)
    clip_set = FieldRecordings(waves[n_train:], labels[n_train:], "clip")
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True)
    val_loader = DataLoader(val_set, batch_size=32, shuffle=False)
    clip_loader = DataLoader(clip_set, batch_size=8, shuffle=False)

    model = SoundCNN(N_CLASSES)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-2)
    steps = args.epochs * len(train_loader)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=steps)

    t0 = time.time()
    for epoch in range(args.epochs):
        running, n_batches = 0.0, 0
        for feats, target in train_loader:
            logits = model(feats)
            loss = F.cross_entropy(logits, target, label_smoothing=0.05)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            running += loss.detach()
            n_batches += 1
        val_loss, val_acc = evaluate(model, val_loader)
        print(f"epoch {epoch + 1:2d}: train_loss {float(running) / n_batches:.4f} "
              f"val_loss {val_loss:.4f} val_acc {val_acc:.3f} ({time.time() - t0:.1f}s)")

    clip_loss, clip_acc = evaluate(model, clip_loader)
    checksum = sum(p.detach().double().sum() for p in model.parameters())
    print(f"clip-level: loss {clip_loss:.4f} acc {clip_acc:.3f}  param checksum {float(checksum):.6f}")


if __name__ == "__main__":
    main()

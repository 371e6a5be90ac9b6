"""Preprocess a folder of utterances into normalised log-mel features (a one-off data preparation script).

Reads every waveform, computes an 80-bin log-mel spectrogram, applies per-frame robust scaling
(median / inter-quartile range over the mel bins of each frame, robust to loudness changes) and
stores all features in one file for training.
"""
import argparse
import math
import tempfile
from pathlib import Path

import numpy as np
import torch

SR = 16000
N_FFT = 400
HOP = 160
N_MELS = 80


def mel_filterbank(n_mels=N_MELS, n_fft=N_FFT, sr=SR):
    def hz_to_mel(f):
        return 2595 * math.log10(1 + f / 700)

    mels = torch.linspace(hz_to_mel(0), hz_to_mel(sr / 2), n_mels + 2)
    hz = 700 * (10 ** (mels / 2595) - 1)
    bins = torch.linspace(0, sr / 2, n_fft // 2 + 1)
    lower, center, upper = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    return torch.clamp(torch.minimum((bins - lower) / (center - lower), (upper - bins) / (upper - center)), min=0)


def write_corpus(folder, n, seed=0):
    """Synthetic 'speech': chirps and noise of 2-6 s, stored as int16 .npy files."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        t = np.arange(int(SR * rng.uniform(2, 6))) / SR
        f0 = rng.uniform(90, 250)
        wave = np.sin(2 * np.pi * f0 * t * (1 + 0.3 * np.sin(2 * np.pi * 0.5 * t))) + 0.1 * rng.standard_normal(len(t))
        np.save(folder / f"utt{i:04d}.npy", (wave * 12000).astype(np.int16))


def robust_scale(row):
    q1, med, q3 = np.percentile(row, [25, 50, 75])
    return (row - med) / (q3 - q1 + 1e-5)


def robust_scale_torch(feats):
    q = torch.quantile(feats, torch.tensor([0.25, 0.5, 0.75]), dim=0, keepdim=True)
    return (feats - q[1]) / (q[2] - q[0] + 1e-5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--utterances", type=int, default=150)
    ap.add_argument("--fixed", action="store_true", help="robust scaling with torch.quantile on the whole matrix")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_corpus(folder, args.utterances)
        fb = mel_filterbank()
        window = torch.hann_window(N_FFT)
        out = {}
        for path in sorted(folder.glob("utt*.npy")):
            wave = torch.from_numpy(np.load(path).astype(np.float32) / 32768)
            spec = torch.stft(wave, N_FFT, HOP, window=window, return_complex=True).abs().pow(2)
            feats = torch.log(fb @ spec + 1e-6)  # (80 mels, frames)
            if args.fixed:
                feats = robust_scale_torch(feats)
            else:
                feats = torch.from_numpy(np.apply_along_axis(robust_scale, 0, feats.numpy())).float()  # PLANTED
            out[path.stem] = feats.T.contiguous()
        torch.save(out, folder / "features.pt")
        frames = sum(f.shape[0] for f in out.values())
        print(f"{len(out)} utterances, {frames} frames, mean {torch.cat(list(out.values())).mean():.4f}")


if __name__ == "__main__":
    main()

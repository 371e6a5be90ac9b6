"""Spectral estimation helpers."""
import torch


def welch_psd(signals, seg_len=2048, overlap=0.75):
    """Welch power spectral density averaged over segments and channels.

    signals: (channels, samples). Returns (freqs, psd) with psd of shape (seg_len//2+1,).
    """
    hop = int(seg_len * (1.0 - overlap))
    window = torch.hann_window(seg_len, periodic=False, dtype=signals.dtype)
    segments = signals.unfold(-1, seg_len, hop)                  # (C, n_seg, seg_len)
    segments = segments - segments.mean(dim=-1, keepdim=True)
    spec = torch.fft.rfft(segments * window, dim=-1)
    power = spec.real ** 2 + spec.imag ** 2
    scale = 1.0 / window.pow(2).sum()
    psd = power.mean(dim=(0, 1)) * scale
    psd[1:-1] *= 2.0
    freqs = torch.fft.rfftfreq(seg_len)
    return freqs, psd


def num_segments(n_samples, seg_len=2048, overlap=0.75):
    hop = int(seg_len * (1.0 - overlap))
    return (n_samples - seg_len) // hop + 1

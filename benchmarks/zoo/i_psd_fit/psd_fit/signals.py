"""Synthetic multi-channel sensor data: red noise + damped resonance + white noise."""
import math

import torch


def ar1_noise(n_channels, n_samples, phi, gen):
    """First-order autoregressive (red) noise generated with a recursive filter in blocks."""
    white = torch.randn(n_channels, n_samples, generator=gen)
    # AR(1) via FFT-based filtering: H(f) = 1 / (1 - phi * exp(-2 pi i f))
    n_fft = 2 * n_samples
    freqs = torch.fft.rfftfreq(n_fft)
    h = 1.0 / (1.0 - phi * torch.exp(-2j * math.pi * freqs))
    out = torch.fft.irfft(torch.fft.rfft(white, n=n_fft) * h, n=n_fft)
    return out[:, :n_samples] * math.sqrt(1.0 - phi ** 2)


def damped_resonance(n_channels, n_samples, f0, q, gen):
    """Stochastically driven oscillator (2nd-order resonant filter of white noise)."""
    white = torch.randn(n_channels, n_samples, generator=gen)
    n_fft = 2 * n_samples
    freqs = torch.fft.rfftfreq(n_fft)
    h = 1.0 / (1.0 - (freqs / f0) ** 2 + 1j * freqs / (q * f0))
    out = torch.fft.irfft(torch.fft.rfft(white, n=n_fft) * h, n=n_fft)
    return out[:, :n_samples]


def make_recordings(n_channels=12, n_samples=2 ** 19, seed=0):
    gen = torch.Generator().manual_seed(seed)
    red = ar1_noise(n_channels, n_samples, phi=0.97, gen=gen)
    res = damped_resonance(n_channels, n_samples, f0=0.12, q=8.0, gen=gen)
    white = torch.randn(n_channels, n_samples, generator=gen)
    gains = 1.0 + 0.1 * torch.randn(n_channels, 1, generator=gen)
    return gains * (1.5 * red + 0.08 * res + 0.6 * white)

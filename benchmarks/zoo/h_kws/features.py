"""Log-mel front end used by the keyword spotter."""
import math

import torch


def hz_to_mel(f):
    return 2595.0 * math.log10(1.0 + f / 700.0)


def mel_to_hz(m):
    return 700.0 * (10 ** (m / 2595.0) - 1.0)


def mel_filterbank(n_mels, n_fft, sample_rate, f_min=20.0, f_max=None):
    f_max = f_max or sample_rate / 2
    n_freqs = n_fft // 2 + 1
    mel_pts = torch.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2)
    hz_pts = torch.tensor([mel_to_hz(float(m)) for m in mel_pts])
    freqs = torch.linspace(0, sample_rate / 2, n_freqs)
    lower = hz_pts[:-2].unsqueeze(1)
    center = hz_pts[1:-1].unsqueeze(1)
    upper = hz_pts[2:].unsqueeze(1)
    up = (freqs - lower) / (center - lower)
    down = (upper - freqs) / (upper - center)
    return torch.clamp(torch.minimum(up, down), min=0.0)  # (n_mels, n_freqs)


def frame_spectrum(frames, window, preemph=0.97):
    """Kaldi-style per-frame processing: DC removal, pre-emphasis, window, |FFT|^2."""
    frames = frames - frames.mean(dim=-1, keepdim=True)
    frames = torch.cat([frames[..., :1] * (1 - preemph), frames[..., 1:] - preemph * frames[..., :-1]], dim=-1)
    return torch.fft.rfft(frames * window, dim=-1).abs() ** 2


def power_spectrogram(wave, n_fft, hop, window, fixed=False):
    """Returns the power spectrogram with shape (n_freqs, n_frames); frames are not centred."""
    if fixed:
        spec = frame_spectrum(wave.unfold(0, n_fft, hop), window)
    else:
        spec = torch.stack([frame_spectrum(wave[s:s + n_fft], window) for s in range(0, wave.numel() - n_fft + 1, hop)])  # PLANTED
    return spec.T


class LogMel:
    def __init__(self, sample_rate=16000, n_fft=400, hop=160, n_mels=40, fixed=False):
        self.n_fft, self.hop = n_fft, hop
        self.window = torch.hann_window(n_fft)
        self.fbank = mel_filterbank(n_mels, n_fft, sample_rate)
        self.fixed = fixed

    def __call__(self, wave):
        power = power_spectrogram(wave, self.n_fft, self.hop, self.window, fixed=self.fixed)
        mel = self.fbank @ power
        logmel = torch.log(mel + 1e-6)
        # per-utterance mean/variance normalisation
        return (logmel - logmel.mean(dim=1, keepdim=True)) / (logmel.std(dim=1, keepdim=True) + 1e-5)

import torch


def make_holdout_set(num_samples, num_channels, window, num_classes, seed=0):
    """Synthetic accelerometer windows: each class has its own frequency signature."""
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, num_classes, (num_samples,), generator=gen)
    t = torch.linspace(0, 1, window)
    freqs = 1.0 + labels.float()[:, None, None] * 0.7
    phase = torch.rand(num_samples, num_channels, 1, generator=gen) * 6.28
    signal = torch.sin(freqs * t * 6.28 + phase)
    noise = 0.8 * torch.randn(num_samples, num_channels, window, generator=gen)
    return signal + noise, labels


def iter_batches(windows, labels, batch_size):
    """Sequential, contiguous mini-batches over the held-out tensors."""
    for start in range(0, labels.shape[0], batch_size):
        stop = start + batch_size
        yield windows[start:stop], labels[start:stop]

"""Synthetic keyword-spotting corpus: each 'word' is a chirp/formant pattern plus noise."""
import math

import torch
from torch.utils.data import Dataset

SAMPLE_RATE = 16000


def make_word(label: int, n_samples: int, gen: torch.Generator) -> torch.Tensor:
    t = torch.arange(n_samples, dtype=torch.float32) / SAMPLE_RATE
    base = 180.0 + 45.0 * label
    sweep = (1.0 + 0.35 * ((label % 3) - 1)) * torch.rand(1, generator=gen).item()
    f0 = base * (1.0 + sweep * t)
    phase = 2 * math.pi * torch.cumsum(f0, 0) / SAMPLE_RATE
    wave = torch.zeros(n_samples)
    for h, amp in enumerate((1.0, 0.5, 0.3, 0.15), start=1):
        wave += amp * torch.sin(h * phase + 2 * math.pi * torch.rand(1, generator=gen).item())
    # amplitude envelope: the word occupies a random sub-interval of the clip
    start = int(torch.randint(0, n_samples // 4, (1,), generator=gen))
    length = int(n_samples * (0.45 + 0.3 * torch.rand(1, generator=gen).item()))
    env = torch.zeros(n_samples)
    env[start:start + length] = torch.hann_window(length, periodic=False)[: n_samples - start]
    noise = 0.25 * torch.randn(n_samples, generator=gen)
    return wave * env + noise


class SyntheticKeywords(Dataset):
    def __init__(self, n_clips, n_classes, featurizer, clip_seconds=1.0, seed=0):
        gen = torch.Generator().manual_seed(seed)
        n_samples = int(SAMPLE_RATE * clip_seconds)
        self.labels = torch.randint(0, n_classes, (n_clips,), generator=gen)
        self.waves = torch.stack([make_word(int(y), n_samples, gen) for y in self.labels])
        self.featurizer = featurizer

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        feats = self.featurizer(self.waves[idx])
        return feats, self.labels[idx]

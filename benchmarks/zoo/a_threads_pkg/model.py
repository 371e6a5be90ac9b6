"""A small convolutional autoencoder for 64x64 grayscale images."""

from __future__ import annotations

import torch


class AutoEncoder(torch.nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.encoder = torch.nn.Sequential(
            torch.nn.Conv2d(1, width, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(2 * width, 4 * width, 3, stride=2, padding=1), torch.nn.ReLU())
        self.decoder = torch.nn.Sequential(
            torch.nn.ConvTranspose2d(4 * width, 2 * width, 4, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(2 * width, width, 4, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(width, 1, 4, stride=2, padding=1), torch.nn.Sigmoid())

    def forward(self, x):
        return self.decoder(self.encoder(x))

"""Parametric PSD model: power-law (red) + Lorentzian resonance + white floor."""
import math

import torch
from torch import nn


class NoiseSpectrumModel(nn.Module):
    def __init__(self):
        super().__init__()
        # all parameters live in log space so they stay positive
        self.log_red_amp = nn.Parameter(torch.tensor(0.0))
        self.log_knee = nn.Parameter(torch.tensor(math.log(0.02)))
        self.log_slope = nn.Parameter(torch.tensor(math.log(1.5)))
        self.log_res_amp = nn.Parameter(torch.tensor(-3.0))
        self.log_f0 = nn.Parameter(torch.tensor(math.log(0.1)))
        self.log_width = nn.Parameter(torch.tensor(math.log(0.02)))
        self.log_white = nn.Parameter(torch.tensor(-1.0))

    def forward(self, freqs):
        knee = self.log_knee.exp()
        slope = self.log_slope.exp()
        red = self.log_red_amp.exp() / (1.0 + (freqs / knee) ** slope)
        f0, width = self.log_f0.exp(), self.log_width.exp()
        lorentz = self.log_res_amp.exp() * width ** 2 / ((freqs - f0) ** 2 + width ** 2)
        return red + lorentz + self.log_white.exp()

    def summary(self):
        return {
            "red_amp": self.log_red_amp.exp().item(),
            "knee": self.log_knee.exp().item(),
            "slope": self.log_slope.exp().item(),
            "res_amp": self.log_res_amp.exp().item(),
            "f0": self.log_f0.exp().item(),
            "width": self.log_width.exp().item(),
            "white": self.log_white.exp().item(),
        }


def whittle_nll(model_psd, observed_psd, dof):
    """Whittle (gamma) negative log-likelihood of an averaged periodogram."""
    ratio = observed_psd / model_psd
    return dof * (torch.log(model_psd) + ratio).mean()

"""Small VGG-style CNN encoder with a SimCLR projection head."""
import torch.nn as nn


def conv_bn(cin, cout, stride=1):
    return [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]


class SimCLRModel(nn.Module):
    def __init__(self, widths=(8, 16, 32), proj_hidden=128, proj_dim=64):
        super().__init__()
        layers, cin = [], 3
        for i, w in enumerate(widths):  # two 3x3 convs per stage, downsampling after the first
            layers += conv_bn(cin, w, stride=1 if i == 0 else 2) + conv_bn(w, w)
            cin = w
        self.encoder = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.projector = nn.Sequential(nn.Linear(cin, proj_hidden, bias=False), nn.BatchNorm1d(proj_hidden),
                                       nn.ReLU(), nn.Linear(proj_hidden, proj_dim))

    def forward(self, x):
        h = self.encoder(x)
        return h, self.projector(h)

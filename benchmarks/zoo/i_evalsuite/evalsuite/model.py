import torch.nn as nn


class ActivityNet(nn.Module):
    """Small 1-D CNN over fixed-length sensor windows."""

    def __init__(self, num_channels, num_classes, width=8):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(num_channels, width, kernel_size=5, padding=2),
            nn.BatchNorm1d(width),
            nn.ReLU(),
            nn.MaxPool1d(2),
            nn.Conv1d(width, width * 2, kernel_size=5, padding=2),
            nn.BatchNorm1d(width * 2),
            nn.ReLU(),
            nn.AdaptiveAvgPool1d(1),
        )
        self.classifier = nn.Linear(width * 2, num_classes)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))

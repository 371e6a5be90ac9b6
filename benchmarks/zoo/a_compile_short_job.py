"""A nightly scoring job: score today's 2,000 product images with a small residual CNN.

The model is wrapped in torch.compile, which costs more than the whole job saves: the job
is short, and the compiled code runs only a few dozen batches. --fixed runs it eagerly."""

from __future__ import annotations

import argparse

import torch


class ResidualBlock(torch.nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(channels)

    def forward(self, x):
        return torch.relu(x + self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x))))))


class SmallResNet(torch.nn.Module):
    def __init__(self, classes: int = 20, width: int = 16):
        super().__init__()
        layers: list[torch.nn.Module] = [torch.nn.Conv2d(3, width, 3, padding=1, bias=False),
                                         torch.nn.BatchNorm2d(width), torch.nn.ReLU()]
        for stage in range(3):
            channels = width * 2 ** stage
            layers += [ResidualBlock(channels), ResidualBlock(channels)]
            if stage < 2:
                layers += [torch.nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1, bias=False),
                           torch.nn.BatchNorm2d(2 * channels), torch.nn.ReLU()]
        layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4 * width, classes)]
        self.net = torch.nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def todays_images(n: int, batch: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    for start in range(0, n, batch):
        yield torch.rand(min(batch, n - start), 3, 32, 32, generator=g)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--fixed", action="store_true", help="run the model eagerly")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = SmallResNet().eval()
    scorer = model if args.fixed else torch.compile(model)  # PLANTED
    counts = torch.zeros(20, dtype=torch.long)
    with torch.inference_mode():
        for images in todays_images(args.images, 50):
            counts += torch.bincount(scorer(images).argmax(1), minlength=20)
    print("predicted classes:", counts.tolist())


if __name__ == "__main__":
    main()

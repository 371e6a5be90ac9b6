"""An image-tagging request handler: decode, resize, classify, answer with the top labels.

Requests arrive as raw 8-bit RGB images of any size (as an HTTP handler would pass them on);
each is resized to 128x128, normalised and classified by a small CNN with a 12k-label head.
"""
import argparse
import copy
import random

import torch
from torch import nn
from torch.nn import functional as F

N_LABELS = 12000


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.BatchNorm2d(128), nn.ReLU(),
            nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, N_LABELS))

    def forward(self, x):
        return self.head(self.features(x))


class Handler:
    mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def __init__(self, model, fixed):
        self.model = model.eval()
        self.fixed = fixed

    def preprocess(self, raw):
        img = raw.permute(2, 0, 1).float().div(255)
        img = F.interpolate(img[None], size=(128, 128), mode="bilinear", antialias=True, align_corners=False)[0]
        return (img - self.mean) / self.std

    def __call__(self, request):
        x = self.preprocess(request["image"])
        model = self.model if self.fixed else copy.deepcopy(self.model)  # PLANTED
        with torch.inference_mode():
            probs = model(x[None]).softmax(-1)[0]
        top = probs.topk(5)
        return {"id": request["id"], "labels": top.indices.tolist(),
                "scores": [round(p, 4) for p in top.values.tolist()]}


def requests(n, seed=0):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    for i in range(n):
        h, w = rng.randint(200, 480), rng.randint(200, 640)
        yield {"id": i, "image": torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=80)
    ap.add_argument("--fixed", action="store_true", help="use the loaded model, not a fresh copy per request")
    args = ap.parse_args()
    torch.manual_seed(0)
    handle = Handler(Tagger(), args.fixed)
    answers = [handle(r) for r in requests(args.requests)]
    print(f"{len(answers)} answers; first {answers[0]['labels']}")


if __name__ == "__main__":
    main()

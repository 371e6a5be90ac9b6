"""Score a ResNet-18-style image classifier on a held-out image set.

The script builds the classifier (deterministically initialised weights stand in
for a trained checkpoint, BatchNorm statistics included), keeps the uint8
evaluation images cached on the device, and streams them in batches through a
preprocessing step (resize 160->144, centre crop 128, normalise) and the network
under torch.no_grad(). It reports top-1 / top-5 accuracy, mean confidence,
mean predictive entropy and a logit checksum.

Planted problem: the model is moved to the device in float64, and the input
pipeline follows the parameter dtype, so every convolution, BatchNorm and
elementwise op of the forward pass runs in FP64. FP32 convolutions use TF32
tensor cores by default (torch.backends.cudnn.allow_tf32), while cuDNN's FP64
convolutions run at a small fraction of that rate on an H100, and every
activation also moves twice the bytes.
Fix (--fixed): keep the model in float32; the inputs follow automatically.
Both versions print the same metrics (to rounding).
"""
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = "--fixed" in sys.argv
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

SEED = 7
NUM_CLASSES = 100
RAW = 160
RESIZE = 144
CROP = 128
BANK = 256 if DEVICE == "cuda" else 64
BATCH = 128 if DEVICE == "cuda" else 8
NUM_IMAGES = 25600 if DEVICE == "cuda" else 32
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity, inplace=True)


class ResNet18(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 2, 1, bias=False),
                                  nn.BatchNorm2d(64), nn.ReLU(inplace=True))
        layers, cin = [], 64
        for i, w in enumerate((64, 128, 256, 512)):
            layers += [BasicBlock(cin, w, 1 if i == 0 else 2), BasicBlock(w, w, 1)]
            cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def load_classifier():
    torch.manual_seed(SEED)
    model = ResNet18(NUM_CLASSES)
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(0.6 + 0.4 * torch.rand(m.weight.shape, generator=g))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
                m.running_mean.copy_(0.05 * torch.randn(m.running_mean.shape, generator=g))
                m.running_var.copy_(0.8 + 0.4 * torch.rand(m.running_var.shape, generator=g))
        model.fc.weight.mul_(6.0)
    return model.eval()


def make_eval_set():
    rng = np.random.default_rng(SEED)
    yy, xx = np.mgrid[0:RAW, 0:RAW].astype(np.float32) / RAW
    imgs = np.empty((BANK, 3, RAW, RAW), dtype=np.uint8)
    for i in range(BANK):
        f = rng.uniform(2, 9, size=(3, 2)).astype(np.float32)
        p = rng.uniform(0, 2 * np.pi, size=(3, 1, 1)).astype(np.float32)
        pattern = np.sin(np.float32(2 * np.pi) * (f[:, :1, None] * xx + f[:, 1:, None] * yy) + p)
        noise = 0.15 * rng.standard_normal((3, RAW, RAW), dtype=np.float32)
        imgs[i] = (np.clip(0.5 + 0.3 * pattern + noise, 0, 1) * 255).astype(np.uint8)
    labels = rng.integers(0, NUM_CLASSES, size=NUM_IMAGES)
    return (torch.from_numpy(imgs).to(DEVICE),
            torch.from_numpy(labels).to(DEVICE))


def batches(bank, labels, batch_size):
    n = labels.numel()
    for start in range(0, n, batch_size):
        idx = torch.arange(start, min(start + batch_size, n), device=bank.device)
        yield bank.index_select(0, idx % bank.shape[0]), labels[idx]


def preprocess(raw, dtype):
    x = raw.to(dtype).div_(255.0)
    x = F.interpolate(x, size=(RESIZE, RESIZE), mode="bilinear", align_corners=False)
    off = (RESIZE - CROP) // 2
    x = x[:, :, off:off + CROP, off:off + CROP]
    mean = torch.tensor(MEAN, dtype=dtype, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(STD, dtype=dtype, device=x.device).view(1, 3, 1, 1)
    return (x - mean) / std


@torch.no_grad()
def score(model, bank, labels):
    dtype = next(model.parameters()).dtype
    totals = torch.zeros(5, dtype=torch.float64, device=DEVICE)
    for raw, y in batches(bank, labels, BATCH):
        logits = model(preprocess(raw, dtype)).float()
        prob = logits.softmax(dim=1)
        top5 = logits.topk(5, dim=1).indices
        totals += torch.stack([
            (top5[:, 0] == y).sum().double(),
            (top5 == y[:, None]).any(dim=1).sum().double(),
            prob.max(dim=1).values.double().sum(),
            -(prob * prob.clamp_min(1e-12).log()).sum().double(),
            logits.double().sum(),
        ])
    return (totals / labels.numel()).tolist()


def main():
    model = load_classifier()
    model = model.to(DEVICE, dtype=torch.float32 if FIXED else torch.float64)  # PLANTED: float64 weights pull the whole forward pass into FP64
    bank, labels = make_eval_set()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    top1, top5, conf, entropy, logit_mean = score(model, bank, labels)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    print(f"mode={'fixed' if FIXED else 'planted'} device={DEVICE} images={labels.numel()}")
    print(f"checksum: top1={top1:.4f} top5={top5:.4f} confidence={conf:.4f} "
          f"entropy={entropy:.4f} logit_mean={logit_mean:.4f}")
    print(f"elapsed_s={elapsed:.2f}")


if __name__ == "__main__":
    main()

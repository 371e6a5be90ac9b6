"""Corruption-robustness sweep for a tabular classifier, served through torch.compile.

A residual MLP is trained briefly on synthetic class-conditional data, then
compiled and evaluated under increasing Gaussian-noise / feature-dropout
severity.  For every severity we report accuracy, NLL and expected
calibration error (ECE) computed from per-example records.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--fixed", action="store_true")
parser.add_argument("--n-eval", type=int, default=8192)
args = parser.parse_args()

torch.manual_seed(0)
N_FEATURES, N_CLASSES = 48, 10


class ResidualBlock(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class TabularNet(nn.Module):
    def __init__(self, n_in, n_out, dim=128, depth=3):
        super().__init__()
        self.stem = nn.Linear(n_in, dim)
        self.blocks = nn.Sequential(*[ResidualBlock(dim, 2 * dim) for _ in range(depth)])
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, n_out))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


def make_data(n, centers, scale=1.6):
    y = torch.randint(0, N_CLASSES, (n,))
    x = centers[y] + scale * torch.randn(n, N_FEATURES)
    return x, y


def corrupt(x, severity, gen):
    noise = severity * torch.randn(x.shape, generator=gen)
    keep = (torch.rand(x.shape, generator=gen) > 0.3 * severity).float()
    return (x + noise) * keep


def train(model, x, y, steps=25, bs=256):
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(steps):
        idx = torch.randint(0, x.shape[0], (bs,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return loss.item()


def expected_calibration_error(conf, correct, n_bins=15):
    bins = torch.clamp((conf * n_bins).long(), max=n_bins - 1)
    count = torch.bincount(bins, minlength=n_bins).float()
    conf_sum = torch.bincount(bins, weights=conf, minlength=n_bins)
    acc_sum = torch.bincount(bins, weights=correct.float(), minlength=n_bins)
    nonzero = count > 0
    gap = (conf_sum[nonzero] - acc_sum[nonzero]).abs()
    return (gap.sum() / count.sum()).item()


@torch.inference_mode()
def evaluate(model, loader):
    confs, preds, labels, nlls = [], [], [], []
    for xb, yb in loader:
        logp = model(xb).log_softmax(-1)
        conf, pred = logp.exp().max(-1)
        confs.append(conf)
        preds.append(pred)
        labels.append(yb)
        nlls.append(-logp.gather(1, yb[:, None]).squeeze(1))
    conf, pred = torch.cat(confs), torch.cat(preds)
    label, nll = torch.cat(labels), torch.cat(nlls)
    correct = pred == label
    return {"acc": correct.float().mean().item(), "nll": nll.mean().item(),
            "ece": expected_calibration_error(conf, correct)}


def main():
    centers = 1.0 * torch.randn(N_CLASSES, N_FEATURES)
    x_train, y_train = make_data(4096, centers)
    x_eval, y_eval = make_data(args.n_eval, centers)

    model = TabularNet(N_FEATURES, N_CLASSES)
    t0 = time.time()
    final_loss = train(model, x_train, y_train)
    print(f"trained: final loss {final_loss:.3f} ({time.time() - t0:.1f}s)")

    model.eval()
    compiled = torch.compile(model)
    eval_bs = 256 if args.fixed else 1   # PLANTED: per-example records for the calibration report

    severities = [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0]
    gen = torch.Generator().manual_seed(1234)
    t0 = time.time()
    print(f"{'severity':>8} {'acc':>7} {'nll':>7} {'ece':>7}")
    for sev in severities:
        ds = TensorDataset(corrupt(x_eval, sev, gen), y_eval)
        loader = DataLoader(ds, batch_size=eval_bs, shuffle=False)
        m = evaluate(compiled, loader)
        print(f"{sev:8.2f} {m['acc']:7.3f} {m['nll']:7.3f} {m['ece']:7.3f}")
    print(f"sweep time {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()

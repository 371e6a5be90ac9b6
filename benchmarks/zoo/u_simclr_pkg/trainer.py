"""SimCLR pretraining (LARS, warmup + cosine LR) and linear-probe evaluation."""
import itertools
import math
import time

import torch
import torch.nn.functional as F

from losses import nt_xent


def warmup_cosine(step, total_steps, warmup_steps, min_ratio=0.01):
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    t = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * t))


class LARS:
    """Momentum SGD with layer-wise trust ratios (You et al., 2017); biases and
    BatchNorm parameters get neither weight decay nor adaptation, as in SimCLR."""

    def __init__(self, params, lr, momentum=0.9, weight_decay=1e-6, eta=0.02):
        self.lr, self.momentum, self.weight_decay, self.eta = lr, momentum, weight_decay, eta
        self.params = [p for p in params if p.requires_grad]
        self.bufs = [torch.zeros_like(p) for p in self.params]

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        for p, buf in zip(self.params, self.bufs):
            d_p = p.grad
            if p.ndim > 1:
                d_p = d_p.add(p, alpha=self.weight_decay)
                w_norm, g_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(d_p)
                trust = torch.where((w_norm > 0) & (g_norm > 0), self.eta * w_norm / g_norm, 1.0)
                d_p = d_p * trust
            buf.mul_(self.momentum).add_(d_p)
            p.sub_(buf, alpha=self.lr)


class Trainer:
    def __init__(self, model, total_steps, lr=1.0, weight_decay=1e-6, warmup_steps=2,
                 temperature=0.2, log_every=4):
        self.model, self.total_steps, self.warmup_steps = model, total_steps, warmup_steps
        self.base_lr, self.temperature, self.log_every = lr, temperature, log_every
        self.optimizer = LARS(model.parameters(), lr=lr, weight_decay=weight_decay)
        self.step = 0

    def train_step(self, view_a, view_b):
        self.model.train()
        self.optimizer.lr = self.base_lr * warmup_cosine(self.step, self.total_steps, self.warmup_steps)
        _, z_a = self.model(view_a)
        _, z_b = self.model(view_b)
        loss, acc = nt_xent(z_a, z_b, self.temperature)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.step += 1
        return loss.item(), acc.item()

    def fit(self, loader):
        t0, logs = time.perf_counter(), []
        for view_a, view_b in itertools.islice(loader, self.total_steps):
            logs.append(self.train_step(view_a, view_b))
            if self.step % self.log_every == 0 or self.step == self.total_steps:
                loss, acc = (sum(v) / len(logs) for v in zip(*logs))
                print(f"step {self.step:3d}/{self.total_steps}  nt-xent {loss:.4f}  pos-top1 {acc:.3f}"
                      f"  lr {self.optimizer.lr:.4f}  ({time.perf_counter() - t0:.1f}s)")
                logs = []

    @torch.no_grad()
    def embed(self, images, batch_size=512):
        self.model.eval()
        return torch.cat([self.model.encoder(images[i:i + batch_size])
                          for i in range(0, len(images), batch_size)])

    def linear_probe(self, train, test, num_classes, epochs=10, batch_size=256, lr=0.5, seed=0):
        """Softmax regression on frozen, standardised encoder features."""
        (x_tr, y_tr), (x_te, y_te) = train, test
        f_tr, f_te = self.embed(x_tr), self.embed(x_te)
        mu, sd = f_tr.mean(0), f_tr.std(0) + 1e-6
        f_tr, f_te = (f_tr - mu) / sd, (f_te - mu) / sd
        g = torch.Generator().manual_seed(seed)
        w = (0.01 * torch.randn(f_tr.shape[1], num_classes, generator=g)).requires_grad_()
        b = torch.zeros(num_classes, requires_grad=True)
        for _ in range(epochs):
            for idx in torch.randperm(len(f_tr), generator=g).split(batch_size):
                loss = F.cross_entropy(f_tr[idx] @ w + b, y_tr[idx]) + 1e-4 * w.pow(2).sum()
                gw, gb = torch.autograd.grad(loss, (w, b))
                with torch.no_grad():
                    w -= lr * gw
                    b -= lr * gb
        with torch.no_grad():
            return tuple(((f @ w + b).argmax(1) == y).float().mean().item()
                         for f, y in ((f_tr, y_tr), (f_te, y_te)))

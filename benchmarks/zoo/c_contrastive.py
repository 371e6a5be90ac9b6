"""MoCo-style contrastive training of a tabular encoder (momentum key encoder +
queue of negatives), organised as a small Trainer with pluggable hooks
(logging, LR schedule, checkpointing).

Usage: python contrastive.py [--fixed]
"""
import argparse
import copy
import os
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self, d_in=64, width=1024, d_out=128):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, width), nn.BatchNorm1d(width), nn.ReLU(),
            nn.Linear(width, width), nn.BatchNorm1d(width), nn.ReLU(),
            nn.Linear(width, width), nn.BatchNorm1d(width), nn.ReLU(),
        )
        self.proj = nn.Sequential(nn.Linear(width, 256), nn.ReLU(), nn.Linear(256, d_out))

    def forward(self, x):
        return F.normalize(self.proj(self.net(x)), dim=-1)


class MoCo(nn.Module):
    def __init__(self, queue_size=4096, dim=128, m=0.99, tau=0.2):
        super().__init__()
        self.encoder_q = Encoder(d_out=dim)
        self.encoder_k = copy.deepcopy(self.encoder_q)
        for p in self.encoder_k.parameters():
            p.requires_grad_(False)
        self.m, self.tau = m, tau
        self.register_buffer("queue", F.normalize(torch.randn(queue_size, dim), dim=1))
        self.register_buffer("ptr", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def momentum_update(self):
        qp = [p.detach() for p in self.encoder_q.parameters()]
        kp = list(self.encoder_k.parameters())
        torch._foreach_lerp_(kp, qp, 1 - self.m)

    @torch.no_grad()
    def enqueue(self, k):
        n, p = k.shape[0], int(self.ptr)
        self.queue[p:p + n] = k
        self.ptr.fill_((p + n) % self.queue.shape[0])

    def forward(self, x_q, x_k):
        q = self.encoder_q(x_q)
        with torch.no_grad():
            self.momentum_update()
            k = self.encoder_k(x_k)
        l_pos = (q * k).sum(1, keepdim=True)
        l_neg = q @ self.queue.clone().detach().t()
        logits = torch.cat([l_pos, l_neg], 1) / self.tau
        loss = F.cross_entropy(logits, torch.zeros(q.shape[0], dtype=torch.long))
        self.enqueue(k)
        return loss


class Hook:
    def on_train_start(self, trainer): pass
    def on_step_end(self, trainer): pass
    def on_train_end(self, trainer): pass


class LogHook(Hook):
    def __init__(self, every):
        self.every = every

    def on_step_end(self, trainer):
        if trainer.step % self.every == 0:
            print(f"step {trainer.step:5d} loss {trainer.last_loss:.4f} lr {trainer.lr():.2e}")


class CosineLRHook(Hook):
    def on_train_start(self, trainer):
        self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(trainer.opt, trainer.max_steps)

    def on_step_end(self, trainer):
        self.sched.step()


class CheckpointHook(Hook):
    def __init__(self, path, every, fixed):
        self.path, self.every, self.fixed = path, every, fixed

    def on_step_end(self, trainer):
        state = {"model": trainer.model.state_dict(), "opt": trainer.opt.state_dict(), "step": trainer.step}
        if not self.fixed or trainer.step % self.every == 0: torch.save(state, self.path)  # PLANTED

    def on_train_end(self, trainer):
        torch.save({"model": trainer.model.state_dict()}, self.path)


class Trainer:
    def __init__(self, model, data, hooks, max_steps, batch_size, lr):
        self.model, self.data, self.hooks = model, data, hooks
        self.max_steps, self.batch_size = max_steps, batch_size
        self.opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=1e-4)
        self.step, self.last_loss = 0, float("nan")
        self.gen = torch.Generator().manual_seed(1)

    def lr(self):
        return self.opt.param_groups[0]["lr"]

    def augment(self, x):
        mask = (torch.rand(x.shape, generator=self.gen) > 0.2).float()
        noise = 0.1 * torch.randn(x.shape, generator=self.gen)
        return x * mask + noise

    def fire(self, event):
        for h in self.hooks:
            getattr(h, event)(self)

    def fit(self):
        self.model.train()
        self.fire("on_train_start")
        n = self.data.shape[0]
        while self.step < self.max_steps:
            idx = torch.randint(0, n, (self.batch_size,), generator=self.gen)
            x = self.data[idx]
            loss = self.model(self.augment(x), self.augment(x))
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            self.step += 1
            self.last_loss = loss.item()
            self.fire("on_step_end")
        self.fire("on_train_end")


def make_data(n=20000, d=64, k=20):
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(k, d, generator=g) * 2
    labels = torch.randint(0, k, (n,), generator=g)
    return centers[labels] + torch.randn(n, d, generator=g)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--steps", type=int, default=220)
    args = ap.parse_args()
    torch.manual_seed(0)
    data = make_data()
    model = MoCo()
    ckpt = os.path.join(tempfile.gettempdir(), "contrastive_ckpt.pt")
    hooks = [LogHook(50), CosineLRHook(), CheckpointHook(ckpt, every=100, fixed=args.fixed)]
    t0 = time.time()
    Trainer(model, data, hooks, args.steps, batch_size=32, lr=1e-3).fit()
    print(f"done in {time.time() - t0:.2f}s")


if __name__ == "__main__":
    main()

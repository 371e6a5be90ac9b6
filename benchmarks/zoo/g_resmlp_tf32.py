"""Trainer for a deep residual-MLP regressor on synthetic embedding features.

Expected H100 time: one step is 8 blocks x 2 GEMMs of 8192x2048x8192 -> ~13.2 TFLOP fwd+bwd.
With TF32 disabled cuBLAS runs plain FP32 SGEMM on the SIMT cores (~50 TFLOP/s), so ~0.26 s/step
x 60 steps + eval + ~2-3 s CUDA startup ~= 18 s. With TF32 tensor cores (~300 TFLOP/s) the GEMMs
take ~45 ms/step; LayerNorm/GELU/AdamW add ~10 ms -> ~3.3 s + startup ~= 6 s, i.e. ~3x faster.
"""
import argparse
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SMOKE = os.environ.get("SMOKE") == "1"


class Block(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class ResMLP(nn.Module):
    def __init__(self, in_dim, dim, hidden, depth, out_dim):
        super().__init__()
        self.inp = nn.Linear(in_dim, dim)
        self.blocks = nn.ModuleList([Block(dim, hidden) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, out_dim)

    def forward(self, x):
        x = self.inp(x)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


class Trainer:
    def __init__(self, cfg, device):
        self.cfg = cfg
        self.device = device
        torch.manual_seed(0)
        self.model = ResMLP(cfg["in_dim"], cfg["dim"], cfg["hidden"], cfg["depth"], cfg["out_dim"]).to(device)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg["lr"], weight_decay=0.01)
        self.sched = torch.optim.lr_scheduler.OneCycleLR(self.opt, max_lr=cfg["lr"], total_steps=cfg["steps"])
        # fixed random "teacher" that defines the regression targets
        g = torch.Generator(device=device).manual_seed(1234)
        self.teacher_a = torch.randn(cfg["in_dim"], 256, device=device, generator=g) / cfg["in_dim"] ** 0.5
        self.teacher_b = torch.randn(256, cfg["out_dim"], device=device, generator=g) / 16.0
        self.data_gen = torch.Generator(device=device).manual_seed(42)
        self.step = 0

    def make_batch(self, gen=None):
        gen = gen or self.data_gen
        x = torch.randn(self.cfg["batch"], self.cfg["in_dim"], device=self.device, generator=gen)
        y = torch.tanh(x @ self.teacher_a) @ self.teacher_b
        return x, y

    def train_step(self, x, y):
        self.model.train()
        pred = self.model(x)
        loss = F.mse_loss(pred, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.sched.step()
        self.step += 1
        return loss.detach()

    @torch.no_grad()
    def evaluate(self, n_batches):
        self.model.eval()
        gen = torch.Generator(device=self.device).manual_seed(777)
        total = torch.zeros((), device=self.device)
        for _ in range(n_batches):
            x, y = self.make_batch(gen)
            total += F.mse_loss(self.model(x), y)
        return (total / n_batches).item()

    def fit(self):
        cfg = self.cfg
        t0 = time.time()
        running = torch.zeros((), device=self.device)
        for i in range(cfg["steps"]):
            x, y = self.make_batch()
            running += self.train_step(x, y)
            if (i + 1) % cfg["log_every"] == 0:
                avg = (running / cfg["log_every"]).item()
                running.zero_()
                print(f"step {i + 1:4d}  train_mse {avg:.5f}  lr {self.sched.get_last_lr()[0]:.2e}")
        if self.device == "cuda":
            torch.cuda.synchronize()
        elapsed = time.time() - t0
        rows = cfg["steps"] * cfg["batch"]
        print(f"trained {cfg['steps']} steps in {elapsed:.2f}s ({rows / elapsed:,.0f} rows/s)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = args.fixed  # PLANTED

    if SMOKE:
        cfg = dict(in_dim=64, dim=64, hidden=256, depth=2, out_dim=16, batch=256, steps=20, log_every=10, lr=1e-3)
    else:
        cfg = dict(in_dim=1024, dim=2048, hidden=8192, depth=8, out_dim=128, batch=8192, steps=60, log_every=20, lr=1e-3)

    trainer = Trainer(cfg, device)
    n_params = sum(p.numel() for p in trainer.model.parameters())
    print(f"device={device} params={n_params / 1e6:.1f}M batch={cfg['batch']}")
    trainer.fit()
    print(f"eval_mse {trainer.evaluate(4):.5f}")


if __name__ == "__main__":
    main()

"""Feature-distillation training with a callback-driven Trainer.

A frozen "teacher" projection produces target embeddings for random token
features; a student made of pre-norm residual MLP blocks (d=2048, ffn=8192,
8 blocks, ~270M params) is trained with AdamW to reproduce them (MSE). A
Trainer class runs the loop and calls callbacks (LR warm-up/cosine schedule,
gradient clipping, loss logging, periodic evaluation). At the end it prints the
final eval loss, a parameter checksum and the elapsed time.

Planted problem: the run config keeps float32 matmul precision at "highest", so
every GEMM of this matmul-dominated model runs as plain FP32 on the CUDA cores
instead of the Tensor Cores. With --fixed the config uses "high", which lets
cuBLAS use TF32 Tensor Core kernels (about 6x the FP32 matmul throughput on an
H100). The fix only changes matmul rounding (TF32 has a 10-bit mantissa), so the
reported metrics agree to ~3 significant digits on the GPU (exactly on CPU,
where the setting is not applied).
"""
import math
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = "--fixed" in sys.argv
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ON_GPU = DEVICE == "cuda"


@dataclass
class RunConfig:
    d_model: int = 2048 if ON_GPU else 256
    d_ff: int = 8192 if ON_GPU else 1024
    n_blocks: int = 8 if ON_GPU else 4
    tokens_per_batch: int = 4096 if ON_GPU else 512
    n_train_batches: int = 12
    n_eval_batches: int = 2
    max_steps: int = 72 if ON_GPU else 24
    lr: float = 3e-4
    weight_decay: float = 0.01
    warmup_steps: int = 8
    clip_norm: float = 1.0
    log_every: int = 12
    eval_every: int = 24
    seed: int = 17
    matmul_precision: str = "high" if FIXED else "highest"  # PLANTED: FP32 GEMMs bypass Tensor Cores (no TF32)


# ----------------------------------------------------------------------------
# model and data
# ----------------------------------------------------------------------------

class MLPBlock(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.up = nn.Linear(d_model, d_ff)
        self.down = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Student(nn.Module):
    def __init__(self, cfg: RunConfig):
        super().__init__()
        self.blocks = nn.ModuleList(MLPBlock(cfg.d_model, cfg.d_ff) for _ in range(cfg.n_blocks))
        self.final_norm = nn.LayerNorm(cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.proj(self.final_norm(x))


def make_teacher_batches(cfg: RunConfig, n_batches, seed):
    """Random token features and teacher targets, built once on the device."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    d = cfg.d_model
    w1 = torch.randn(d, d, device=DEVICE, generator=gen) / math.sqrt(d)
    w2 = torch.randn(d, d, device=DEVICE, generator=gen) / math.sqrt(d)
    batches = []
    with torch.no_grad():
        for _ in range(n_batches):
            x = torch.randn(cfg.tokens_per_batch, d, device=DEVICE, generator=gen)
            y = torch.tanh(x @ w1) @ w2
            batches.append((x, y))
    return batches


def configure_backend(cfg: RunConfig):
    torch.manual_seed(cfg.seed)
    if ON_GPU:
        torch.backends.cudnn.benchmark = True
        torch.set_float32_matmul_precision(cfg.matmul_precision)


# ----------------------------------------------------------------------------
# callbacks
# ----------------------------------------------------------------------------

class Callback:
    def on_fit_start(self, trainer): pass
    def on_step_start(self, trainer, step): pass
    def on_after_backward(self, trainer, step): pass
    def on_step_end(self, trainer, step, loss): pass
    def on_fit_end(self, trainer): pass


class WarmupCosineLR(Callback):
    def on_step_start(self, trainer, step):
        cfg = trainer.cfg
        if step < cfg.warmup_steps:
            scale = (step + 1) / cfg.warmup_steps
        else:
            t = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
            scale = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))
        for g in trainer.optimizer.param_groups:
            g["lr"] = cfg.lr * scale


class GradClip(Callback):
    def __init__(self):
        self.last_norm = None

    def on_after_backward(self, trainer, step):
        self.last_norm = torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), trainer.cfg.clip_norm)


class LossLogger(Callback):
    def __init__(self):
        self.running = None
        self.count = 0
        self.history = []

    def on_step_end(self, trainer, step, loss):
        self.running = loss.detach() if self.running is None else self.running + loss.detach()
        self.count += 1
        if (step + 1) % trainer.cfg.log_every == 0:
            avg = (self.running / self.count).item()
            self.history.append(avg)
            print(f"  step {step + 1:4d}  train_loss {avg:.5f}  lr {trainer.optimizer.param_groups[0]['lr']:.2e}")
            self.running, self.count = None, 0


class PeriodicEval(Callback):
    def __init__(self, batches):
        self.batches = batches
        self.results = []

    def evaluate(self, model):
        model.eval()
        with torch.no_grad():
            total = sum(F.mse_loss(model(x), y) for x, y in self.batches) / len(self.batches)
        model.train()
        return total.item()

    def on_step_end(self, trainer, step, loss):
        if (step + 1) % trainer.cfg.eval_every == 0:
            val = self.evaluate(trainer.model)
            self.results.append(val)
            print(f"  step {step + 1:4d}  eval_loss  {val:.5f}")


# ----------------------------------------------------------------------------
# trainer
# ----------------------------------------------------------------------------

class Trainer:
    def __init__(self, cfg: RunConfig, model, train_batches, callbacks):
        self.cfg = cfg
        self.model = model
        self.train_batches = train_batches
        self.callbacks = callbacks
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)

    def _emit(self, hook, *args):
        for cb in self.callbacks:
            getattr(cb, hook)(self, *args)

    def _batch(self, step):
        return self.train_batches[step % len(self.train_batches)]

    def _train_step(self, step):
        x, y = self._batch(step)
        loss = F.mse_loss(self.model(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._emit("on_after_backward", step)
        self.optimizer.step()
        return loss

    def fit(self):
        self.model.train()
        self._emit("on_fit_start")
        for step in range(self.cfg.max_steps):
            self._emit("on_step_start", step)
            loss = self._train_step(step)
            self._emit("on_step_end", step, loss)
        self._emit("on_fit_end")


def param_checksum(model):
    with torch.no_grad():
        return sum(p.double().abs().sum() for p in model.parameters()).item()


def main():
    cfg = RunConfig()
    configure_backend(cfg)
    with torch.device(DEVICE):
        model = Student(cfg)
    train_batches = make_teacher_batches(cfg, cfg.n_train_batches, seed=cfg.seed)
    eval_batches = make_teacher_batches(cfg, cfg.n_eval_batches, seed=cfg.seed + 1)
    evaluator = PeriodicEval(eval_batches)
    callbacks = [WarmupCosineLR(), GradClip(), LossLogger(), evaluator]
    trainer = Trainer(cfg, model, train_batches, callbacks)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"device={DEVICE} fixed={FIXED} params={n_params / 1e6:.1f}M steps={cfg.max_steps}")

    if ON_GPU:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    trainer.fit()
    final_eval = evaluator.evaluate(model)
    if ON_GPU:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0

    print(f"final_eval_loss={final_eval:.4f} param_checksum={param_checksum(model):.1f}")
    print(f"elapsed_s={elapsed:.3f}")


if __name__ == "__main__":
    main()

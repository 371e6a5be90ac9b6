"""MoCo-style self-supervised pretraining on tabular sensor vectors.

The model is written as a Lightning-style module (training_step, batch/epoch hooks,
configure_optimizers) and driven by a tiny home-made Trainer.
"""
import argparse
import copy
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--fixed", action="store_true")
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()


def make_sensor_data(n, dim=64, n_classes=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(n_classes, dim, generator=g) * 0.5
    mixing = torch.randn(dim, dim, generator=g) / math.sqrt(dim)
    y = torch.randint(0, n_classes, (n,), generator=g)
    x = centers[y] + torch.randn(n, dim, generator=g)
    return torch.tanh(x @ mixing), y


class Augment:
    def __init__(self, drop=0.2, noise=0.15, scale=(0.8, 1.2)):
        self.drop, self.noise, self.scale = drop, noise, scale

    def __call__(self, x):
        mask = (torch.rand_like(x) > self.drop).float()
        s = torch.empty(x.shape[0], 1).uniform_(*self.scale)
        return x * mask * s + self.noise * torch.randn_like(x)


def mlp(in_dim, hidden, out_dim):
    return nn.Sequential(
        nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True),
        nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True),
        nn.Linear(hidden, out_dim),
    )


class MoCoModule(nn.Module):
    def __init__(self, in_dim=64, hidden=512, dim=256, queue_size=65536, momentum=0.99,
                 temperature=0.1, lr=1e-3, weight_decay=1e-4):
        super().__init__()
        self.hparams = dict(momentum=momentum, temperature=temperature, lr=lr, weight_decay=weight_decay)
        self.encoder_q = mlp(in_dim, hidden, dim)
        self.encoder_k = copy.deepcopy(self.encoder_q)
        for p in self.encoder_k.parameters():
            p.requires_grad = False
        self.queue = nn.Parameter(F.normalize(torch.randn(dim, queue_size), dim=0), requires_grad=not args.fixed)  # PLANTED
        self.register_buffer("queue_ptr", torch.zeros((), dtype=torch.long))
        self.augment = Augment()
        self._keys = None
        self.logged = {}

    def configure_optimizers(self):
        params = [p for p in self.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=self.hparams["lr"], weight_decay=self.hparams["weight_decay"])

    def training_step(self, batch, batch_idx):
        x, _ = batch
        q = F.normalize(self.encoder_q(self.augment(x)), dim=1)
        with torch.no_grad():
            k = F.normalize(self.encoder_k(self.augment(x)), dim=1)
        l_pos = (q * k).sum(dim=1, keepdim=True)
        l_neg = q @ self.queue
        logits = torch.cat([l_pos, l_neg], dim=1) / self.hparams["temperature"]
        labels = torch.zeros(len(x), dtype=torch.long)
        loss = F.cross_entropy(logits, labels)
        self._keys = k
        acc = (logits.argmax(1) == 0).float().mean()
        return {"loss": loss, "acc": acc.detach()}

    @torch.no_grad()
    def on_train_batch_end(self, outputs, batch, batch_idx):
        m = self.hparams["momentum"]
        for pk, pq in zip(self.encoder_k.parameters(), self.encoder_q.parameters()):
            pk.mul_(m).add_(pq.detach(), alpha=1 - m)
        for bk, bq in zip(self.encoder_k.buffers(), self.encoder_q.buffers()):
            bk.copy_(bq)
        k = self._keys
        ptr, K = int(self.queue_ptr), self.queue.shape[1]
        idx = (torch.arange(len(k)) + ptr) % K
        self.queue[:, idx] = k.T
        self.queue_ptr.fill_((ptr + len(k)) % K)

    @torch.no_grad()
    def on_train_epoch_end(self, bank, bank_y, val, val_y, knn_k=20):
        self.eval()
        fb = F.normalize(self.encoder_q(bank), dim=1)
        fv = F.normalize(self.encoder_q(val), dim=1)
        sim, idx = (fv @ fb.T).topk(knn_k, dim=1)
        votes = torch.zeros(len(val), int(bank_y.max()) + 1)
        votes.scatter_add_(1, bank_y[idx], (sim / 0.07).exp())
        self.logged["knn_acc"] = (votes.argmax(1) == val_y).float().mean().item()
        self.train()


class Trainer:
    def __init__(self, max_epochs, gradient_clip_val=None, log_every=50):
        self.max_epochs, self.clip, self.log_every = max_epochs, gradient_clip_val, log_every

    def fit(self, module, train_loader, monitor):
        opt = module.configure_optimizers()
        module.train()
        step = 0
        for epoch in range(self.max_epochs):
            run_loss, run_acc, n = 0.0, 0.0, 0
            for batch_idx, batch in enumerate(train_loader):
                out = module.training_step(batch, batch_idx)
                opt.zero_grad(set_to_none=True)
                out["loss"].backward()
                if self.clip is not None:
                    torch.nn.utils.clip_grad_norm_(
                        [p for g in opt.param_groups for p in g["params"]], self.clip)
                opt.step()
                module.on_train_batch_end(out, batch, batch_idx)
                run_loss += out["loss"].item()
                run_acc += out["acc"].item()
                n += 1
                step += 1
                if step % self.log_every == 0:
                    print(f"  step {step:5d}  loss {run_loss / n:.4f}  inst-acc {run_acc / n:.3f}")
            module.on_train_epoch_end(*monitor)
            print(f"epoch {epoch}: loss {run_loss / n:.4f}  knn-acc {module.logged['knn_acc']:.3f}")


def main():
    torch.manual_seed(0)
    x_all, y_all = make_sensor_data(1216, seed=1)
    x, y, xv, yv = x_all[:768], y_all[:768], x_all[768:], y_all[768:]
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, drop_last=True)
    module = MoCoModule()
    trainer = Trainer(max_epochs=args.epochs, gradient_clip_val=5.0, log_every=10)
    t0 = time.perf_counter()
    trainer.fit(module, loader, monitor=(x, y, xv, yv))
    print(f"elapsed {time.perf_counter() - t0:.2f}s")


if __name__ == "__main__":
    main()

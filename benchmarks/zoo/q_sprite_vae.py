"""Beta-VAE on procedurally generated 28x28 sprites.

Organised like a LightningModule (training_step / validation_step /
configure_optimizers) driven by a minimal hand-written fit() loop, because the
cluster image has no pytorch-lightning.  Validation reports the ELBO and an
importance-weighted (IWAE, K samples) log-likelihood bound.

    python sprite_vae.py            # as committed
    python sprite_vae.py --fixed    # diagonal Gaussian posterior via Independent(Normal)
"""
import argparse
import math
import time
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Independent, MultivariateNormal, Normal, kl_divergence
from torch.utils.data import DataLoader, TensorDataset

IMG = 28


# --------------------------------------------------------------------------
# synthetic sprites: blobs, rings and bars at random poses
# --------------------------------------------------------------------------
def make_sprites(n, seed):
    g = torch.Generator().manual_seed(seed)
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, IMG), torch.linspace(-1, 1, IMG), indexing="ij")
    grid = torch.stack([xs.flatten(), ys.flatten()], dim=1)          # (784, 2)
    imgs = torch.zeros(n, IMG * IMG)
    for _ in range(3):
        centre = (torch.rand(n, 1, 2, generator=g) - 0.5) * 1.2
        d = grid[None] - centre                                        # (n, 784, 2)
        r = d.norm(dim=-1)
        kind = torch.randint(0, 3, (n, 1), generator=g)
        size = 0.12 + 0.25 * torch.rand(n, 1, generator=g)
        theta = math.pi * torch.rand(n, 1, generator=g)
        blob = torch.exp(-(r / size) ** 2)
        ring = torch.exp(-((r - size) / 0.06) ** 2)
        along = d[..., 0] * torch.cos(theta) + d[..., 1] * torch.sin(theta)
        across = -d[..., 0] * torch.sin(theta) + d[..., 1] * torch.cos(theta)
        bar = torch.exp(-(across / 0.07) ** 2) * torch.sigmoid((size * 2 - along.abs()) / 0.03)
        shape = torch.where(kind == 0, blob, torch.where(kind == 1, ring, bar))
        present = (torch.rand(n, 1, generator=g) < 0.8).float()
        imgs = torch.maximum(imgs, shape * present)
    return imgs.clamp_(0, 1)


# --------------------------------------------------------------------------
# the "LightningModule"
# --------------------------------------------------------------------------
class SpriteVAE(nn.Module):
    def __init__(self, latent_dim=64, hidden=256, lr=1e-3, beta=1.0, warmup_steps=300,
                 iw_samples=16, diag_posterior=False):
        super().__init__()
        self.latent_dim = latent_dim
        self.lr = lr
        self.beta = beta
        self.warmup_steps = warmup_steps
        self.iw_samples = iw_samples
        self.diag_posterior = diag_posterior
        self.encoder = nn.Sequential(
            nn.Linear(IMG * IMG, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden // 2), nn.SiLU(),
            nn.Linear(hidden // 2, 2 * latent_dim),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, hidden // 2), nn.SiLU(),
            nn.Linear(hidden // 2, hidden), nn.SiLU(),
            nn.Linear(hidden, IMG * IMG),
        )
        self.register_buffer("global_step", torch.zeros((), dtype=torch.long))
        self._logged = defaultdict(list)

    # -- logging -----------------------------------------------------------
    def log(self, name, value):
        self._logged[name].append(value.detach())

    def flush_logs(self):
        out = {k: float(torch.stack(v).mean()) for k, v in self._logged.items()}
        self._logged.clear()
        return out

    # -- distributions -----------------------------------------------------
    def prior(self):
        zeros = torch.zeros(self.latent_dim)
        if self.diag_posterior:
            return Independent(Normal(zeros, torch.ones(self.latent_dim)), 1)
        return MultivariateNormal(zeros, covariance_matrix=torch.eye(self.latent_dim))

    def posterior(self, x):
        mu, logvar = self.encoder(x).chunk(2, dim=-1)
        logvar = logvar.clamp(-8.0, 8.0)
        if self.diag_posterior:
            return Independent(Normal(mu, torch.exp(0.5 * logvar)), 1)
        return MultivariateNormal(mu, covariance_matrix=torch.diag_embed(logvar.exp()))  # PLANTED

    def log_likelihood(self, logits, x):
        return -F.binary_cross_entropy_with_logits(logits, x.expand_as(logits), reduction="none").sum(-1)

    def forward(self, x):
        return torch.sigmoid(self.decoder(self.posterior(x).mean))

    # -- steps -------------------------------------------------------------
    def training_step(self, batch, batch_idx):
        (x,) = batch
        q = self.posterior(x)
        z = q.rsample()
        rec = self.log_likelihood(self.decoder(z), x).mean()
        kl = kl_divergence(q, self.prior()).mean()
        beta = self.beta * min(1.0, float(self.global_step + 1) / self.warmup_steps)
        loss = -rec + beta * kl
        self.log("train/loss", loss)
        self.log("train/rec", -rec)
        self.log("train/kl", kl)
        return loss

    def validation_step(self, batch, batch_idx):
        (x,) = batch
        q = self.posterior(x)
        p = self.prior()
        elbo = self.log_likelihood(self.decoder(q.rsample()), x) - kl_divergence(q, p)
        z = q.rsample((self.iw_samples,))                               # (K, B, d)
        log_w = self.log_likelihood(self.decoder(z), x) + p.log_prob(z) - q.log_prob(z)
        iwae = torch.logsumexp(log_w, dim=0) - math.log(self.iw_samples)
        self.log("val/elbo", elbo.mean())
        self.log("val/iwae", iwae.mean())

    def configure_optimizers(self, total_steps):
        opt = torch.optim.Adam(self.parameters(), lr=self.lr)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total_steps, eta_min=self.lr * 0.05)
        return opt, sched


# --------------------------------------------------------------------------
# minimal trainer
# --------------------------------------------------------------------------
def fit(module, train_loader, val_loader, max_epochs, grad_clip=5.0):
    opt, sched = module.configure_optimizers(max_epochs * len(train_loader))
    t0 = time.time()
    for epoch in range(max_epochs):
        module.train()
        for batch_idx, batch in enumerate(train_loader):
            loss = module.training_step(batch, batch_idx)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(module.parameters(), grad_clip)
            opt.step()
            sched.step()
            module.global_step += 1
        train_logs = module.flush_logs()

        module.eval()
        with torch.no_grad():
            for batch_idx, batch in enumerate(val_loader):
                module.validation_step(batch, batch_idx)
        val_logs = module.flush_logs()
        print(f"epoch {epoch + 1}: loss {train_logs['train/loss']:.3f} "
              f"(rec {train_logs['train/rec']:.3f}, kl {train_logs['train/kl']:.3f})  "
              f"val elbo {val_logs['val/elbo']:.3f} iwae {val_logs['val/iwae']:.3f}  "
              f"[{time.time() - t0:.1f}s]")
    return val_logs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--latent-dim", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    train_x = make_sprites(6144, seed=1)
    val_x = make_sprites(1024, seed=2)
    train_loader = DataLoader(TensorDataset(train_x), batch_size=args.batch_size, shuffle=True, drop_last=True)
    val_loader = DataLoader(TensorDataset(val_x), batch_size=256)

    module = SpriteVAE(latent_dim=args.latent_dim, diag_posterior=args.fixed)
    fit(module, train_loader, val_loader, max_epochs=args.epochs)

    with torch.no_grad():
        recon = module(val_x[:256])
        checksum = sum(float(p.double().sum()) for p in module.parameters())
    print(f"val recon MSE {float(F.mse_loss(recon, val_x[:256])):.5f}  param checksum {checksum:.6f}")


if __name__ == "__main__":
    main()

"""Speaker-embedding training with batch-hard triplet loss (Lightning-style module, tiny trainer)."""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = False


def synth_utterances(n_speakers, per_speaker, n_mels=40, frames=60, seed=0):
    """Log-mel-like features: each speaker has a spectral envelope plus a pitch-ish ripple."""
    g = torch.Generator().manual_seed(seed)
    env = torch.randn(n_speakers, n_mels, 1, generator=g)
    ripple = torch.rand(n_speakers, 1, 1, generator=g) * 0.5 + 0.1
    t = torch.arange(frames).float()[None, None, :]
    base = env + 0.5 * torch.sin(ripple * t)
    x = base.repeat_interleave(per_speaker, 0)
    x = x + 2.0 * torch.randn(x.shape, generator=g)
    y = torch.arange(n_speakers).repeat_interleave(per_speaker)
    return x, y


def pk_batches(labels, p, k, n_batches, seed):
    """P speakers x K utterances per batch, as batch-hard mining needs positives in-batch."""
    g = torch.Generator().manual_seed(seed)
    n_spk = int(labels.max()) + 1
    by_spk = [torch.nonzero(labels == s).flatten() for s in range(n_spk)]
    for _ in range(n_batches):
        spk = torch.randperm(n_spk, generator=g)[:p]
        idx = [by_spk[s][torch.randperm(len(by_spk[s]), generator=g)[:k]] for s in spk.tolist()]
        yield torch.cat(idx)


def pairwise_distances(emb):
    if FIXED:
        sq = emb.pow(2).sum(1)
        d2 = sq[:, None] + sq[None, :] - 2.0 * emb @ emb.t()
    else:
        d2 = (emb[:, None, :] - emb[None, :, :]).pow(2).sum(-1)  # PLANTED
    return d2.clamp_min(1e-12).sqrt()


def batch_hard_triplet(emb, labels, margin=0.3):
    d = pairwise_distances(emb)
    same = labels[:, None] == labels[None, :]
    hardest_pos = (d * same).max(1).values
    hardest_neg = (d + 1e4 * same).min(1).values
    return F.relu(hardest_pos - hardest_neg + margin).mean()


class SpeakerModule(nn.Module):
    def __init__(self, n_mels=40, channels=64, emb_dim=256, lr=1e-3):
        super().__init__()
        self.lr = lr
        self.encoder = nn.Sequential(
            nn.Conv1d(n_mels, channels, 5, padding=2), nn.BatchNorm1d(channels), nn.ReLU(),
            nn.Conv1d(channels, channels, 3, padding=1, dilation=1), nn.BatchNorm1d(channels), nn.ReLU(),
        )
        self.head = nn.Linear(2 * channels, emb_dim)

    def forward(self, x):
        h = self.encoder(x)
        stats = torch.cat([h.mean(-1), h.std(-1)], dim=1)  # statistics pooling
        return F.normalize(self.head(stats), dim=1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = batch_hard_triplet(self(x), y)
        return {"loss": loss}

    @torch.no_grad()
    def validation_step(self, batch, batch_idx):
        x, y = batch
        emb = self(x)
        sim = emb @ emb.t()
        sim.fill_diagonal_(-2.0)
        nn_acc = (y[sim.argmax(1)] == y).float().mean()
        return {"nn_acc": nn_acc}

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=1e-4)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return opt, sched


class MiniTrainer:
    def __init__(self, max_epochs, log_every=4):
        self.max_epochs = max_epochs
        self.log_every = log_every

    def fit(self, module, make_train_batches, val_batch):
        opt, sched = module.configure_optimizers()
        for epoch in range(self.max_epochs):
            module.train()
            for i, batch in enumerate(make_train_batches(epoch)):
                out = module.training_step(batch, i)
                opt.zero_grad(set_to_none=True)
                out["loss"].backward()
                opt.step()
                if i % self.log_every == 0:
                    print(f"epoch {epoch} it {i} loss {out['loss'].item():.4f}")
            sched.step()
            module.eval()
            metrics = module.validation_step(val_batch, 0)
            print(f"epoch {epoch} val nn_acc {metrics['nn_acc'].item():.3f}")


def main():
    global FIXED
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--iters", type=int, default=8)
    args = ap.parse_args()
    FIXED = args.fixed
    torch.manual_seed(0)

    x, y = synth_utterances(n_speakers=200, per_speaker=24)
    vx, vy = synth_utterances(n_speakers=200, per_speaker=4, seed=1)
    module = SpeakerModule()

    def make_train_batches(epoch):
        for idx in pk_batches(y, p=32, k=8, n_batches=args.iters, seed=epoch):
            yield x[idx], y[idx]

    t0 = time.time()
    MiniTrainer(max_epochs=args.epochs).fit(module, make_train_batches, (vx, vy))
    print(f"done in {time.time() - t0:.2f}s")


if __name__ == "__main__":
    main()

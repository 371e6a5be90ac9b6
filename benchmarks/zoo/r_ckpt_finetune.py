"""Fine-tune a small bag-of-tokens text classifier on synthetic data.

Trainer supports gradient accumulation, CPU mixed precision (bfloat16 autocast),
periodic checkpointing and early stopping on validation loss.
"""
import argparse
import os
import shutil
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 100000
SEQ_LEN = 48
N_CLASSES = 5
EMB_DIM = 128


def make_dataset(n, gen, topic_words):
    """Each document mixes uniform noise tokens with tokens from its class topic."""
    labels = torch.randint(0, N_CLASSES, (n,), generator=gen)
    noise = torch.randint(0, VOCAB, (n, SEQ_LEN), generator=gen)
    topic_idx = torch.randint(0, topic_words.shape[1], (n, SEQ_LEN), generator=gen)
    topical = topic_words[labels][torch.arange(n)[:, None], topic_idx]
    mask = torch.rand(n, SEQ_LEN, generator=gen) < 0.4
    tokens = torch.where(mask, topical, noise)
    return tokens, labels


class TextClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        # stands in for pretrained word vectors; kept frozen while fine-tuning the head
        self.embed = nn.EmbeddingBag(VOCAB, EMB_DIM, mode="mean")
        self.embed.weight.requires_grad_(False)
        self.mlp = nn.Sequential(
            nn.Linear(EMB_DIM, 256), nn.GELU(), nn.Dropout(0.1),
            nn.Linear(256, 128), nn.GELU(),
            nn.Linear(128, N_CLASSES),
        )

    def forward(self, tokens):
        return self.mlp(self.embed(tokens))


class Trainer:
    def __init__(self, model, train_data, val_data, *, lr, batch_size, accum_steps,
                 max_epochs, patience, ckpt_dir, save_every_steps):
        self.model = model
        self.train_x, self.train_y = train_data
        self.val_x, self.val_y = val_data
        self.batch_size = batch_size
        self.accum_steps = accum_steps
        self.max_epochs = max_epochs
        self.patience = patience
        self.ckpt_dir = ckpt_dir
        self.save_every_steps = save_every_steps
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.trainable, lr=lr, weight_decay=0.01)
        self.global_step = 0
        self.best_val = float("inf")
        self.bad_epochs = 0
        os.makedirs(ckpt_dir, exist_ok=True)

    def save_checkpoint(self, name):
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.global_step,
            "best_val": self.best_val,
        }
        torch.save(state, os.path.join(self.ckpt_dir, name))

    def _micro_batches(self, perm):
        for start in range(0, len(perm), self.batch_size):
            idx = perm[start:start + self.batch_size]
            yield self.train_x[idx], self.train_y[idx]

    def train_epoch(self, epoch, gen):
        self.model.train()
        perm = torch.randperm(len(self.train_x), generator=gen)
        total_loss, n_seen = 0.0, 0
        self.optimizer.zero_grad(set_to_none=True)
        for i, (xb, yb) in enumerate(self._micro_batches(perm)):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = self.model(xb)
            loss = F.cross_entropy(logits.float(), yb)
            (loss / self.accum_steps).backward()
            total_loss += loss.detach() * len(yb)
            n_seen += len(yb)
            if (i + 1) % self.accum_steps == 0:
                torch.nn.utils.clip_grad_norm_(self.trainable, 1.0)
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                self.global_step += 1
                if self.save_every_steps and self.global_step % self.save_every_steps == 0:
                    self.save_checkpoint("last.pt")
        return (total_loss / n_seen).item()

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        losses, correct = [], 0
        for start in range(0, len(self.val_x), 1024):
            xb = self.val_x[start:start + 1024]
            yb = self.val_y[start:start + 1024]
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = self.model(xb).float()
            losses.append(F.cross_entropy(logits, yb, reduction="sum"))
            correct += (logits.argmax(-1) == yb).sum()
        return (torch.stack(losses).sum() / len(self.val_y)).item(), correct.item() / len(self.val_y)

    def fit(self, gen):
        history = []
        for epoch in range(self.max_epochs):
            train_loss = self.train_epoch(epoch, gen)
            val_loss, val_acc = self.evaluate()
            history.append((train_loss, val_loss, val_acc))
            print(f"epoch {epoch:2d} step {self.global_step:4d} train {train_loss:.4f} "
                  f"val {val_loss:.4f} acc {val_acc:.4f}")
            self.save_checkpoint("last.pt")
            if val_loss < self.best_val - 1e-4:
                self.best_val = val_loss
                self.bad_epochs = 0
                self.save_checkpoint("best.pt")
            else:
                self.bad_epochs += 1
                if self.bad_epochs >= self.patience:
                    print(f"early stopping at epoch {epoch}")
                    break
        return history


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixed", action="store_true")
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args()

    torch.manual_seed(0)
    np.random.seed(0)
    gen = torch.Generator().manual_seed(1234)
    topic_words = torch.randint(0, VOCAB, (N_CLASSES, 300), generator=gen)
    train = make_dataset(24000, gen, topic_words)
    val = make_dataset(4000, gen, topic_words)

    model = TextClassifier()
    trainer = Trainer(
        model, train, val,
        lr=3e-3, batch_size=64, accum_steps=2,
        max_epochs=args.epochs, patience=2,
        ckpt_dir=tempfile.mkdtemp(prefix="zoo-ckpt-"),  # (the zoo's copy: not beside the script)
        # checkpoint "often enough to survive preemption"; the epoch-end save already covers it
        save_every_steps=0 if args.fixed else 8,  # PLANTED
    )
    t0 = time.perf_counter()
    history = trainer.fit(gen)
    elapsed = time.perf_counter() - t0

    best = torch.load(os.path.join(trainer.ckpt_dir, "best.pt"), weights_only=True)
    model.load_state_dict(best["model"])
    val_loss, val_acc = trainer.evaluate()
    checksum = sum(p.double().sum().item() for p in model.parameters())
    print(f"best val loss {val_loss:.5f} acc {val_acc:.4f} epochs {len(history)} "
          f"param checksum {checksum:.6f}")
    print(f"fit time {elapsed:.2f}s")
    shutil.rmtree(trainer.ckpt_dir, ignore_errors=True)


if __name__ == "__main__":
    main()

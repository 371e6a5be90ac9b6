"""Train a small Transformer on synthetic user-session event sequences.

Every session is a variable-length list of event ids.  The model is trained
jointly on next-event prediction (masked over padding) and on a per-session
conversion label (class-weighted BCE, conversions are rare).  The best
checkpoint is kept in a scratch directory that is removed at the end.
"""
import argparse
import os
import shutil
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

PAD = 0


def make_sessions(n, vocab, min_len=6, max_len=32, seed=0):
    """Sessions drift through a region of the catalogue (a clipped random walk
    over event ids); occasional checkout events (ids 1..5) are sprinkled in and
    sessions that end near a checkout usually convert."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=g)
    start = torch.randint(6, vocab, (n, 1), generator=g)
    walk = (start + torch.randint(-3, 4, (n, max_len), generator=g).cumsum(1)).clamp(6, vocab - 1)
    checkout = torch.rand(n, max_len, generator=g) < 0.04
    events = torch.where(checkout, torch.randint(1, 6, (n, max_len), generator=g), walk)
    idx = torch.arange(max_len)
    near_end = (idx >= lengths[:, None] - 10) & (idx < lengths[:, None])
    labels = ((events <= 5) & near_end).any(1) & (torch.rand(n, generator=g) < 0.8)
    sessions = [row[:l] for row, l in zip(events.tolist(), lengths.tolist())]
    return sessions, labels.float().tolist()


class SessionDataset(torch.utils.data.Dataset):
    def __init__(self, sessions, labels):
        self.sessions, self.labels = sessions, labels

    def __len__(self):
        return len(self.sessions)

    def __getitem__(self, i):
        return self.sessions[i], self.labels[i]


def collate(batch):
    """Pad to the longest session in the batch."""
    longest = max(len(s) for s, _ in batch)
    tokens = torch.full((len(batch), longest), PAD, dtype=torch.long)
    for row, (s, _) in enumerate(batch):
        tokens[row, :len(s)] = torch.tensor(s)
    labels = torch.tensor([y for _, y in batch])
    return tokens, labels


class SessionTransformer(nn.Module):
    def __init__(self, vocab, d_model=32, heads=4, layers=2, max_len=64, dropout=0.1):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, 2 * d_model, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.next_head = nn.Linear(d_model, vocab)
        self.cls_head = nn.Linear(d_model, 1)

    def forward(self, tokens):
        T = tokens.size(1)
        pad = tokens.eq(PAD)
        causal = torch.ones(T, T, dtype=torch.bool).triu(1)
        h = self.tok(tokens) + self.pos(torch.arange(T))
        h = self.encoder(h, mask=causal, src_key_padding_mask=pad)
        last = (~pad).sum(1) - 1                              # causal: last position sees everything
        pooled = h[torch.arange(h.size(0)), last]
        return self.next_head(h), self.cls_head(pooled).squeeze(-1)


class SessionLoss(nn.Module):
    """Next-event cross-entropy over real positions + weighted conversion BCE."""

    def __init__(self, pos_weight=2.5, cls_weight=0.5):
        super().__init__()
        self.register_buffer("pos_weight", torch.tensor(pos_weight))
        self.cls_weight = cls_weight

    def forward(self, next_logits, cls_logit, tokens, labels):
        target = tokens[:, 1:].masked_fill(tokens[:, 1:].eq(PAD), -100)
        lm = F.cross_entropy(next_logits[:, :-1].reshape(-1, next_logits.size(-1)), target.reshape(-1))
        cls = F.binary_cross_entropy_with_logits(cls_logit, labels, pos_weight=self.pos_weight)
        return lm + self.cls_weight * cls, {"lm": lm.detach(), "cls": cls.detach()}


class MetricsLogger:
    """Running averages of the loss parts; every `log_every` steps it prints them
    together with the current validation loss so the learning curve can be
    followed during the epoch."""

    def __init__(self, log_every=10, fixed=False):
        self.log_every, self.fixed = log_every, fixed
        self.curve, self.history = [], []
        self._reset()

    def _reset(self):
        self.sums, self.count, self.t0 = {}, 0, time.time()

    def on_batch_end(self, trainer, step, parts, batch_size):
        for k, v in parts.items():
            self.sums[k] = self.sums.get(k, 0.0) + float(v) * batch_size
        self.count += batch_size
        if step % self.log_every == 0:
            msg = f"  step {step:4d} " + " ".join(f"{k}={v / self.count:.4f}" for k, v in self.sums.items())
            if not self.fixed:
                val = trainer.validate()  # PLANTED
                self.curve.append((step, val["val_loss"]))
                msg += f" val_loss={val['val_loss']:.4f}"
            print(msg)

    def on_epoch_end(self, epoch, val):
        train = {k: v / max(self.count, 1) for k, v in self.sums.items()}
        self.history.append({"epoch": epoch, **train, **val})
        print(f"epoch {epoch}: lm={train['lm']:.4f} cls={train['cls']:.4f} val_loss={val['val_loss']:.4f} "
              f"val_acc={val['val_acc']:.3f} ({time.time() - self.t0:.1f}s)")
        self._reset()


class Trainer:
    def __init__(self, model, loss_fn, train_loader, val_batches, callback, ckpt_dir, lr=3e-3, clip=1.0):
        self.model, self.loss_fn, self.callback = model, loss_fn, callback
        self.train_loader, self.val_batches = train_loader, val_batches
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
        self.clip, self.ckpt_dir = clip, ckpt_dir
        self.step, self.best = 0, float("inf")

    def train_epoch(self):
        self.model.train()
        for tokens, labels in self.train_loader:
            next_logits, cls_logit = self.model(tokens)
            loss, parts = self.loss_fn(next_logits, cls_logit, tokens, labels)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
            self.opt.step()
            self.step += 1
            self.callback.on_batch_end(self, self.step, parts, tokens.size(0))

    @torch.no_grad()
    def validate(self):
        """Loss and conversion accuracy on the held-out sessions; restores the
        previous train/eval mode so it can be called mid-epoch."""
        was_training = self.model.training
        self.model.eval()
        tot_loss, correct, n = 0.0, 0, 0
        for tokens, labels in self.val_batches:
            next_logits, cls_logit = self.model(tokens)
            loss, _ = self.loss_fn(next_logits, cls_logit, tokens, labels)
            tot_loss += loss.item() * tokens.size(0)
            correct += ((cls_logit > 0).float() == labels).sum().item()
            n += tokens.size(0)
        self.model.train(was_training)
        return {"val_loss": tot_loss / n, "val_acc": correct / n}

    def fit(self, epochs):
        for epoch in range(1, epochs + 1):
            self.train_epoch()
            val = self.validate()
            if val["val_loss"] < self.best:
                self.best = val["val_loss"]
                torch.save(self.model.state_dict(), os.path.join(self.ckpt_dir, "best.pt"))
            self.callback.on_epoch_end(epoch, val)
        return self.best


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--vocab", type=int, default=200)
    p.add_argument("--train-sessions", type=int, default=1024)
    p.add_argument("--val-sessions", type=int, default=5120)
    p.add_argument("--log-every", type=int, default=4)
    p.add_argument("--fixed", action="store_true", help="use the faster variant")
    args = p.parse_args()

    torch.manual_seed(0)
    tr_s, tr_y = make_sessions(args.train_sessions, args.vocab, seed=1)
    va_s, va_y = make_sessions(args.val_sessions, args.vocab, seed=2)
    train_loader = DataLoader(SessionDataset(tr_s, tr_y), batch_size=args.batch_size,
                              shuffle=True, collate_fn=collate)
    # the validation set is fixed, so collate it once up front
    bs = args.batch_size
    val_batches = [collate(list(zip(va_s[i:i + bs], va_y[i:i + bs]))) for i in range(0, len(va_s), bs)]

    model = SessionTransformer(args.vocab)
    ckpt_dir = tempfile.mkdtemp(prefix="session_tf_")
    try:
        trainer = Trainer(model, SessionLoss(), train_loader, val_batches,
                          MetricsLogger(log_every=args.log_every, fixed=args.fixed), ckpt_dir)
        best = trainer.fit(args.epochs)
        print(f"best val_loss={best:.4f}")
    finally:
        shutil.rmtree(ckpt_dir, ignore_errors=True)


if __name__ == "__main__":
    main()

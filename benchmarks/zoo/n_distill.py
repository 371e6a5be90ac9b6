"""Distilling a Transformer text classifier into a small student (DistilBERT-style).

A `TeacherEncoder` (4 pre-norm Transformer blocks, d_model=384) stands in for a
fine-tuned classifier: it is initialised from a fixed seed and then frozen in
eval mode. A `StudentEncoder` (2 blocks, d_model=96) is trained to imitate it on
a synthetic token-sequence classification set (Zipf-distributed token ids
with one class-specific key phrase per sequence), using the usual Hinton loss:
    alpha * T^2 * KL(softmax(t/T) || softmax(s/T)) + (1 - alpha) * CE(s, labels).
Training is driven by a `Distiller` class (AdamW, linear warm-up, gradient
clipping); batches come from a `TransferSet` class (no DataLoader). At the end the
student's accuracy and KL to the teacher on a held-out split are reported.

Planted problem:
    Distiller.train_step() (line 147) calls `self.teacher(tokens)` with autograd
    enabled; the teacher is in eval mode but its parameters still require
    grad. Its logits therefore carry an autograd graph into distill_loss(), and
    `loss.backward()` back-propagates through the whole teacher too (d_model=384,
    ~30x the student's matmul FLOPs): every teacher matmul gets its input- and
    weight-gradient matmuls, gradients are accumulated into teacher .grad
    tensors nobody reads, and all teacher activations are kept alive until the
    backward pass. Roughly two thirds of each step is spent on the teacher's
    unneeded backward.
Fix (--fixed):
    Compute the teacher logits under `torch.no_grad()`. The student's
    gradients, updates and all printed metrics are unchanged.
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 2000
SEQ_LEN = 48
N_CLASSES = 4
N_TRAIN = 384
N_TEST = 64
BATCH = 32
TEMPERATURE = 2.0
ALPHA = 0.5
LR = 3e-3
WARMUP = 4


class TransferSet:
    """Synthetic token sequences: Zipf background + one class key phrase each."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        ranks = torch.arange(1, VOCAB + 1, dtype=torch.float32)
        zipf = 1.0 / ranks
        self.tokens = torch.multinomial(zipf / zipf.sum(), n * SEQ_LEN, replacement=True,
                                        generator=g).view(n, SEQ_LEN)
        phrases = torch.randint(VOCAB // 2, VOCAB, (N_CLASSES, 3), generator=g)
        which = torch.randint(0, N_CLASSES, (n,), generator=g)
        start = torch.randint(0, SEQ_LEN - 3, (n,), generator=g)
        cols = start[:, None] + torch.arange(3)
        self.tokens.scatter_(1, cols, phrases[which])
        self.labels = which
        self.tokens[:, 0] = 1  # [CLS]
        self.gen = g

    def __len__(self):
        return self.tokens.shape[0]

    def batches(self, batch_size, shuffle=True):
        n = len(self)
        order = torch.randperm(n, generator=self.gen) if shuffle else torch.arange(n)
        for i in range(0, n - batch_size + 1, batch_size):
            idx = order[i:i + batch_size]
            yield self.tokens[idx], self.labels[idx]


class Block(nn.Module):
    def __init__(self, d, n_head, dropout):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_head, d // self.n_head).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           dropout_p=self.drop.p if self.training else 0.0)
        x = x + self.drop(self.out(a.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.ff(self.ln2(x)))


class Encoder(nn.Module):
    def __init__(self, d, n_layer, n_head, dropout=0.1):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, d)
        self.pos = nn.Parameter(0.02 * torch.randn(SEQ_LEN, d))
        self.blocks = nn.ModuleList(Block(d, n_head, dropout) for _ in range(n_layer))
        self.ln = nn.LayerNorm(d)
        self.cls = nn.Linear(d, N_CLASSES)

    def forward(self, tokens):
        x = self.tok(tokens) + self.pos
        for blk in self.blocks:
            x = blk(x)
        h = self.ln(x)
        return self.cls(h.mean(dim=1))


class TeacherEncoder(Encoder):
    def __init__(self):
        super().__init__(d=384, n_layer=4, n_head=8)


class StudentEncoder(Encoder):
    def __init__(self):
        super().__init__(d=96, n_layer=2, n_head=4)


def distill_loss(s_logits, t_logits, labels, temperature, alpha):
    soft_t = F.softmax(t_logits / temperature, dim=-1)
    log_s = F.log_softmax(s_logits / temperature, dim=-1)
    kd = F.kl_div(log_s, soft_t, reduction="batchmean") * temperature**2
    ce = F.cross_entropy(s_logits, labels)
    return alpha * kd + (1.0 - alpha) * ce, kd, ce


class Distiller:
    def __init__(self, teacher, student, total_steps, fixed=False):
        self.teacher = teacher.eval()
        self.student = student
        self.fixed = fixed
        self.opt = torch.optim.AdamW(student.parameters(), lr=LR, weight_decay=0.01)
        self.sched = torch.optim.lr_scheduler.LambdaLR(
            self.opt, lambda s: min(1.0, (s + 1) / WARMUP) * max(0.0, 1 - s / total_steps))
        self.history = []

    def train_step(self, tokens, labels):
        self.student.train()
        s_logits = self.student(tokens)
        if self.fixed:
            with torch.no_grad():
                t_logits = self.teacher(tokens)
        else:
            t_logits = self.teacher(tokens)  # PLANTED
        loss, kd, ce = distill_loss(s_logits, t_logits, labels, TEMPERATURE, ALPHA)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.student.parameters(), 1.0)
        self.opt.step()
        self.sched.step()
        self.history.append(torch.stack([loss.detach(), kd.detach(), ce.detach()]))

    @torch.no_grad()
    def evaluate(self, data):
        self.student.eval()
        correct = total = 0
        kl = 0.0
        for tokens, labels in data.batches(64, shuffle=False):
            s, t = self.student(tokens), self.teacher(tokens)
            correct += int((s.argmax(-1) == labels).sum())
            kl += float(F.kl_div(F.log_softmax(s, -1), F.softmax(t, -1), reduction="sum"))
            total += tokens.shape[0]
        return correct / total, kl / total


def main():
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(0)
    teacher = TeacherEncoder()
    student = StudentEncoder()
    train = TransferSet(N_TRAIN, seed=1)
    test = TransferSet(N_TEST, seed=2)
    steps = len(train) // BATCH
    distiller = Distiller(teacher, student, total_steps=steps, fixed=args.fixed)

    t0 = time.perf_counter()
    for step, (tokens, labels) in enumerate(train.batches(BATCH)):
        distiller.train_step(tokens, labels)
        if (step + 1) % 6 == 0:
            loss, kd, ce = distiller.history[-1].tolist()
            print(f"step {step + 1:3d}  loss {loss:.4f}  kd {kd:.4f}  ce {ce:.4f}")
    train_s = time.perf_counter() - t0
    acc, kl = distiller.evaluate(test)
    print(f"train time {train_s:.2f}s  student acc {acc:.3f}  KL(teacher||student) {kl:.4f}")


if __name__ == "__main__":
    main()

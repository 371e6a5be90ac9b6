"""Sample text from a small GPT-style decoder (random weights, char-level vocab).

Usage: python textgen.py [--fixed] [--new-tokens N]
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def attn(self, x, past=None):
        B, T, C = x.shape
        h = self.n_head
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, h, C // h).transpose(1, 2)
        k = k.view(B, T, h, C // h).transpose(1, 2)
        v = v.view(B, T, h, C // h).transpose(1, 2)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        S = k.shape[2]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // h)
        # causal mask aligned to the end of the key sequence
        mask = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.proj(y), (k, v)

    def forward(self, x, past=None):
        a, present = self.attn(self.ln1(x), past)
        x = x + a
        x = x + self.mlp(self.ln2(x))
        return x, present


class TinyGPT(nn.Module):
    def __init__(self, vocab=512, d=256, n_layer=4, n_head=4, max_len=1024):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList([Block(d, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, cache=None):
        """Returns (logits, new_cache). With cache=None runs the whole sequence."""
        B, T = idx.shape
        start = 0 if cache is None else cache[0][0].shape[2]
        pos = torch.arange(start, start + T)
        x = self.tok(idx) + self.pos(pos)[None]
        new_cache = []
        for i, blk in enumerate(self.blocks):
            x, present = blk(x, None if cache is None else cache[i])
            new_cache.append(present)
        return self.head(self.ln_f(x)), new_cache


@torch.no_grad()
def generate(model, prompt, n_new, temperature, fixed):
    seq = prompt
    cache = None
    for _ in range(n_new):
        if fixed:
            logits, cache = model(seq if cache is None else seq[:, -1:], cache)
        else:
            logits, _ = model(seq)  # PLANTED
        probs = F.softmax(logits[:, -1] / temperature, dim=-1)
        nxt = torch.multinomial(probs, 1)
        seq = torch.cat([seq, nxt], dim=1)
    return seq


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--new-tokens", type=int, default=170)
    ap.add_argument("--batch", type=int, default=4)
    args = ap.parse_args()

    torch.manual_seed(0)
    model = TinyGPT().eval()
    prompts = torch.randint(0, 512, (args.batch, 32))
    t0 = time.time()
    out = generate(model, prompts, args.new_tokens, 0.8, args.fixed)
    dt = time.time() - t0
    print(f"generated {out.shape} checksum={int(out.sum())} "
          f"{args.batch * args.new_tokens / dt:.1f} tok/s time={dt:.2f}s")


if __name__ == "__main__":
    main()

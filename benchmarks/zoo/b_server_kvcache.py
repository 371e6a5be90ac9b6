"""A text-completion endpoint: a small decoder-only language model with a hand-written KV cache.

Each request carries a prompt (token ids); the handler pre-fills the cache with the prompt,
then decodes greedily up to `max_new` tokens. The cache is sized for the model's full context.
"""
import argparse
import random

import torch
from torch import nn
from torch.nn import functional as F

VOCAB = 4096
D = 256
HEADS = 4
HEAD_DIM = D // HEADS
LAYERS = 2
MAX_CTX = 32768


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, cache, pos):
        """x: (T, D) new tokens at positions pos..pos+T-1; cache: (2, HEADS, MAX_CTX, HEAD_DIM)."""
        t = x.shape[0]
        q, k, v = self.qkv(self.ln1(x)).view(t, 3, HEADS, HEAD_DIM).unbind(1)
        cache[0, :, pos:pos + t] = k.transpose(0, 1)
        cache[1, :, pos:pos + t] = v.transpose(0, 1)
        keys, values = cache[0, :, :pos + t], cache[1, :, :pos + t]
        causal = torch.ones(t, pos + t, dtype=torch.bool).tril(pos)
        att = F.scaled_dot_product_attention(q.transpose(0, 1), keys, values, attn_mask=causal)
        x = x + self.proj(att.transpose(0, 1).reshape(t, D))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(MAX_CTX, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D)

    def forward(self, ids, cache, pos):
        x = self.emb(ids) + self.pos(torch.arange(pos, pos + len(ids)))
        for block, c in zip(self.blocks, cache):
            x = block(x, c, pos)
        return self.ln(x[-1]) @ self.emb.weight.T  # next-token logits


class CompletionHandler:
    def __init__(self, model, fixed):
        self.model = model.eval()
        self.fixed = fixed
        self.cache = torch.zeros(LAYERS, 2, HEADS, MAX_CTX, HEAD_DIM) if fixed else None

    @torch.inference_mode()
    def __call__(self, prompt, max_new=12):
        cache = self.cache if self.fixed else torch.zeros(LAYERS, 2, HEADS, MAX_CTX, HEAD_DIM)  # PLANTED
        ids = torch.tensor(prompt)
        logits = self.model(ids, cache, 0)
        out, pos = [], len(prompt)
        for _ in range(max_new):
            nxt = int(logits.argmax())
            out.append(nxt)
            logits = self.model(torch.tensor([nxt]), cache, pos)
            pos += 1
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=80)
    ap.add_argument("--fixed", action="store_true", help="allocate the KV cache once and reuse it")
    args = ap.parse_args()
    torch.manual_seed(0)
    handler = CompletionHandler(TinyLM(), args.fixed)
    rng = random.Random(0)
    total = 0
    for i in range(args.requests):
        prompt = [rng.randrange(VOCAB) for _ in range(rng.randint(8, 64))]
        completion = handler(prompt)
        total += len(completion)
        if i % 40 == 0:
            print(f"request {i}: prompt {len(prompt)} tokens -> {completion[:6]}...")
    print(f"{args.requests} requests, {total} tokens generated")


if __name__ == "__main__":
    main()

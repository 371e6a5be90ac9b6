"""Tiny GPT behind a request handler: batched-queue style text completion service."""
import argparse
import json
import math
import time
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 4096
    n_layer: int = 4
    n_head: int = 8
    d_model: int = 256
    max_seq: int = 512


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x, past=None):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        # with a cache and T == 1 the single query may attend to every key
        y = F.scaled_dot_product_attention(q, k, v, is_causal=(T > 1))
        y = y.transpose(1, 2).reshape(B, T, C)
        return self.proj(y), (k, v)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))

    def forward(self, x, past=None):
        a, present = self.attn(self.ln1(x), past)
        x = x + a
        x = x + self.mlp(self.ln2(x))
        return x, present


class TinyGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.max_seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight

    def forward(self, ids, past_key_values=None):
        offset = 0 if past_key_values is None else past_key_values[0][0].shape[2]
        pos = torch.arange(offset, offset + ids.shape[1])
        x = self.tok_emb(ids) + self.pos_emb(pos)
        presents = []
        for i, blk in enumerate(self.blocks):
            x, p = blk(x, None if past_key_values is None else past_key_values[i])
            presents.append(p)
        return self.lm_head(self.ln_f(x)), presents


@dataclass
class CompletionRequest:
    request_id: int
    prompt_ids: list
    max_new_tokens: int = 64
    temperature: float = 0.8
    top_k: int = 40
    seed: int = 0
    stop_id: int = -1


@dataclass
class CompletionResponse:
    request_id: int
    tokens: list = field(default_factory=list)
    latency_ms: float = 0.0


class CompletionServer:
    def __init__(self, model, use_cache=False):
        self.model = model.eval()
        self.use_cache = use_cache
        self.served = 0
        self.total_tokens = 0

    def _sample(self, logits, req, gen):
        logits = logits / req.temperature
        topv, topi = torch.topk(logits, req.top_k)
        probs = F.softmax(topv, dim=-1)
        choice = torch.multinomial(probs, 1, generator=gen)
        return topi.gather(-1, choice)

    @torch.inference_mode()
    def generate(self, req):
        gen = torch.Generator().manual_seed(req.seed)
        ids = torch.tensor([req.prompt_ids], dtype=torch.long)
        logits, past = self.model(ids)
        out = []
        for _ in range(req.max_new_tokens):
            nxt = self._sample(logits[:, -1], req, gen)
            tok = int(nxt)
            out.append(tok)
            if tok == req.stop_id:
                break
            ids = torch.cat([ids, nxt], dim=1)
            if self.use_cache:
                logits, past = self.model(nxt, past_key_values=past)
            else:
                logits, _ = self.model(ids)  # PLANTED
        return out

    def handle(self, payload: str) -> str:
        t0 = time.perf_counter()
        req = CompletionRequest(**json.loads(payload))
        tokens = self.generate(req)
        resp = CompletionResponse(req.request_id, tokens, (time.perf_counter() - t0) * 1e3)
        self.served += 1
        self.total_tokens += len(tokens)
        return json.dumps(resp.__dict__)


def fake_traffic(n_requests, vocab_size, seed=0):
    g = torch.Generator().manual_seed(seed)
    for i in range(n_requests):
        plen = int(torch.randint(16, 96, (1,), generator=g))
        prompt = torch.randint(2, vocab_size, (plen,), generator=g).tolist()
        yield json.dumps({"request_id": i, "prompt_ids": prompt,
                          "max_new_tokens": 96, "seed": 1000 + i})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--fixed", action="store_true")
    args = ap.parse_args()

    torch.manual_seed(0)
    cfg = GPTConfig()
    model = TinyGPT(cfg)
    server = CompletionServer(model, use_cache=args.fixed)

    latencies, checksum = [], 0
    for payload in fake_traffic(args.requests, cfg.vocab_size):
        resp = json.loads(server.handle(payload))
        latencies.append(resp["latency_ms"])
        checksum = (checksum * 31 + sum(resp["tokens"])) % 1_000_003
    latencies.sort()
    print(f"served {server.served} requests, {server.total_tokens} tokens")
    print(f"p50 latency {latencies[len(latencies) // 2]:.1f} ms, p max {latencies[-1]:.1f} ms")
    print(f"token checksum {checksum}")


if __name__ == "__main__":
    main()

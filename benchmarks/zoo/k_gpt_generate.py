"""Batched autoregressive text generation with a small GPT-style decoder.

A randomly initialised 8-layer decoder (d_model 1024, 16 heads, 32k vocabulary, fp32) continues
a batch of synthetic prompts token by token with repetition penalty, temperature and top-k
sampling (Gumbel-max with a seeded generator), for two request batches, and prints a checksum of
the generated tokens plus the elapsed time.

Planted problem: the Generator is constructed with use_cache=False, so at every new token the
whole prefix (prompt + all tokens generated so far) is run through every layer again; the work per
token grows with the sequence length, the run is quadratic in the generated length and bound by
fp32 matmul throughput. With --fixed the generator keeps a per-layer key/value cache: the prompt
is prefilled once and each step feeds only the newest token, attending to the cached keys and
values. Both paths produce the same logits up to float rounding and use the same sampling noise,
so they generate the same tokens.
"""
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = "--fixed" in sys.argv
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

VOCAB = 32000
D_MODEL = 1024
N_LAYER = 8
N_HEAD = 16
PAD_ID = 0
EOS_ID = 2

if DEVICE == "cuda":
    BATCH, PROMPT_LEN, NEW_TOKENS, ROUNDS = 16, 64, 320, 2
else:
    BATCH, PROMPT_LEN, NEW_TOKENS, ROUNDS = 2, 16, 24, 1
MAX_LEN = PROMPT_LEN + NEW_TOKENS


class KVCache:
    """Preallocated key/value buffers, one pair per layer."""

    def __init__(self, n_layer, batch, n_head, max_len, head_dim, dtype, device):
        shape = (batch, n_head, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layer)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layer)]

    def update(self, layer, pos, k, v):
        t = k.shape[2]
        self.k[layer][:, :, pos:pos + t] = k
        self.v[layer][:, :, pos:pos + t] = v
        return self.k[layer][:, :, :pos + t], self.v[layer][:, :, :pos + t]


class Block(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x, layer_idx, cache, pos):
        B, T, C = x.shape
        hd = C // self.n_head
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        if cache is not None:
            k, v = cache.update(layer_idx, pos, k, v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
        return x


class TinyGPT(nn.Module):
    def __init__(self, vocab, d_model, n_layer, n_head, max_len):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear):
            nn.init.zeros_(m.bias)

    def forward(self, idx, cache=None, pos=0):
        """Returns next-token logits [B, vocab] for the last position of idx."""
        T = idx.shape[1]
        positions = torch.arange(pos, pos + T, device=idx.device)
        x = self.wte(idx) + self.wpe(positions)[None]
        for i, blk in enumerate(self.blocks):
            x = blk(x, i, cache, pos)
        x = self.ln_f(x[:, -1, :])
        return x @ self.wte.weight.t()


def apply_repetition_penalty(logits, history, penalty):
    score = logits.gather(1, history)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return logits.scatter(1, history, score)


def top_k_filter(logits, k):
    kth = torch.topk(logits, k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def gumbel_argmax(logits, gen):
    u = torch.rand(logits.shape, generator=gen, device=logits.device)
    g = -torch.log(-torch.log(u.clamp(1e-10, 1.0 - 1e-7)))
    return (logits + g).argmax(dim=-1)


class Sampler:
    def __init__(self, temperature=0.8, top_k=50, repetition_penalty=1.2, seed=1234):
        self.temperature = temperature
        self.top_k = top_k
        self.repetition_penalty = repetition_penalty
        self.gen = torch.Generator(device=DEVICE)
        self.gen.manual_seed(seed)

    def __call__(self, logits, history):
        logits = apply_repetition_penalty(logits.float(), history, self.repetition_penalty)
        logits = top_k_filter(logits / self.temperature, self.top_k)
        return gumbel_argmax(logits, self.gen)


class Generator:
    def __init__(self, model, sampler, use_cache=True):
        self.model = model
        self.sampler = sampler
        self.use_cache = use_cache

    def _new_cache(self, batch, max_len):
        p = next(self.model.parameters())
        return KVCache(N_LAYER, batch, N_HEAD, max_len, D_MODEL // N_HEAD, p.dtype, p.device)

    @torch.inference_mode()
    def generate(self, prompts, new_tokens):
        B, P = prompts.shape
        tokens = torch.full((B, P + new_tokens), PAD_ID, dtype=torch.long, device=prompts.device)
        tokens[:, :P] = prompts
        finished = torch.zeros(B, dtype=torch.bool, device=prompts.device)
        cache = self._new_cache(B, P + new_tokens) if self.use_cache else None
        logits = self.model(prompts, cache=cache, pos=0)
        for step in range(new_tokens):
            cur = P + step
            nxt = self.sampler(logits, tokens[:, :cur])
            nxt = torch.where(finished, torch.full_like(nxt, PAD_ID), nxt)
            tokens[:, cur] = nxt
            finished |= nxt == EOS_ID
            if step + 1 == new_tokens:
                break
            if self.use_cache:
                logits = self.model(nxt[:, None], cache=cache, pos=cur)
            else:
                logits = self.model(tokens[:, :cur + 1])
        return tokens[:, P:], finished


def make_prompts(batch, length, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=g).to(DEVICE)


def token_checksum(gen_tokens):
    w = torch.arange(1, gen_tokens.shape[1] + 1, device=gen_tokens.device)
    return int(((gen_tokens * w).sum(dim=1) % 1000003).sum().item())


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def main():
    torch.manual_seed(0)
    with torch.device(DEVICE):
        model = TinyGPT(VOCAB, D_MODEL, N_LAYER, N_HEAD, MAX_LEN).eval()
    sampler = Sampler()
    gen = Generator(model, sampler, use_cache=FIXED)  # PLANTED: no KV cache, whole prefix re-run through the model every token
    sync()
    t0 = time.perf_counter()
    checksum, n_finished = 0, 0
    for r in range(ROUNDS):
        prompts = make_prompts(BATCH, PROMPT_LEN, seed=100 + r)
        out, finished = gen.generate(prompts, NEW_TOKENS)
        checksum += token_checksum(out)
        n_finished += int(finished.sum().item())
        print(f"round {r}: first tokens {out[0, :8].tolist()}")
    sync()
    elapsed = time.perf_counter() - t0
    print(f"generated {ROUNDS * BATCH * NEW_TOKENS} tokens, finished={n_finished}")
    print(f"checksum {checksum}")
    print(f"elapsed {elapsed:.2f} s")


if __name__ == "__main__":
    main()

"""Batch inference for a GRU encoder-decoder summarizer.

Loads (here: synthesizes) a checkpoint, encodes a corpus of source
documents and draws several candidate summaries per document with
nucleus sampling, then reranks candidates by length-normalised
log-probability.
"""
import argparse
import math
import time

import torch
import torch.nn as nn

PAD, BOS, EOS = 0, 1, 2


class Encoder(nn.Module):
    def __init__(self, vocab, emb, hid):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.rnn = nn.GRU(emb, hid, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * hid, hid)

    def forward(self, src):
        out, h = self.rnn(self.embed(src))
        h = torch.tanh(self.bridge(torch.cat([h[0], h[1]], dim=-1)))
        return out, h.unsqueeze(0)


class AttnDecoder(nn.Module):
    def __init__(self, vocab, emb, hid):
        super().__init__()
        self.embed = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.rnn = nn.GRU(emb, hid, batch_first=True)
        self.key = nn.Linear(2 * hid, hid, bias=False)
        self.value = nn.Linear(2 * hid, hid, bias=False)
        self.out = nn.Sequential(nn.Linear(2 * hid, hid), nn.Tanh(), nn.Linear(hid, vocab))

    def project_memory(self, memory):
        return self.key(memory), self.value(memory)

    def forward(self, tokens, keys, values, src_mask, hidden):
        dec, hidden = self.rnn(self.embed(tokens), hidden)
        scores = dec @ keys.transpose(1, 2) / math.sqrt(dec.size(-1))
        scores = scores.masked_fill(~src_mask.unsqueeze(1), float("-inf"))
        ctx = torch.softmax(scores, dim=-1) @ values
        return self.out(torch.cat([dec, ctx], dim=-1)), hidden


class Seq2Seq(nn.Module):
    def __init__(self, vocab=8000, emb=128, hid=256):
        super().__init__()
        self.encoder = Encoder(vocab, emb, hid)
        self.decoder = AttnDecoder(vocab, emb, hid)


def make_corpus(n_docs, vocab, gen):
    lengths = torch.randint(40, 120, (n_docs,), generator=gen)
    docs = []
    for L in lengths.tolist():
        body = torch.randint(3, vocab, (L,), generator=gen)
        docs.append(torch.cat([body, torch.tensor([EOS])]))
    return docs


def collate(docs):
    width = max(len(d) for d in docs)
    batch = torch.full((len(docs), width), PAD, dtype=torch.long)
    for i, d in enumerate(docs):
        batch[i, : len(d)] = d
    return batch


def top_k_top_p(logits, top_k, top_p):
    cand_logits, cand_ids = torch.topk(logits, top_k, dim=-1)
    probs = torch.softmax(cand_logits, dim=-1)
    drop = probs.cumsum(-1) - probs > top_p
    cand_logits = cand_logits.masked_fill(drop, float("-inf"))
    return cand_logits, cand_ids


@torch.no_grad()
def sample_summaries(model, src, n_samples, max_len, temperature, top_p, gen, fixed):
    src = src.repeat_interleave(n_samples, dim=0)
    src_mask = src != PAD
    memory, enc_hidden = model.encoder(src)
    keys, values = model.decoder.project_memory(memory)
    B = src.size(0)
    ys = torch.full((B, max_len + 1), PAD, dtype=torch.long)
    ys[:, 0] = BOS
    logp_total = torch.zeros(B)
    finished = torch.zeros(B, dtype=torch.bool)
    lengths = torch.full((B,), max_len)
    hidden = enc_hidden
    for t in range(max_len):
        if fixed:
            logits, hidden = model.decoder(ys[:, t : t + 1], keys, values, src_mask, hidden)
        else:
            logits, hidden = model.decoder(ys[:, : t + 1], keys, values, src_mask, enc_hidden)  # PLANTED
        logits = logits[:, -1] / temperature
        cand_logits, cand_ids = top_k_top_p(logits, 40, top_p)
        probs = torch.softmax(cand_logits, dim=-1)
        pick = torch.multinomial(probs, 1, generator=gen)
        nxt = cand_ids.gather(1, pick).squeeze(1)
        step_logp = torch.log(probs.gather(1, pick).squeeze(1))
        logp_total += torch.where(finished, torch.zeros_like(step_logp), step_logp)
        nxt = torch.where(finished, torch.full_like(nxt, PAD), nxt)
        newly = (nxt == EOS) & ~finished
        lengths[newly] = t + 1
        finished |= newly
        ys[:, t + 1] = nxt
        if finished.all():
            break
    return ys[:, 1:], logp_total, lengths


def rerank(ys, logp, lengths, n_samples, alpha=0.7):
    score = logp / lengths.float().pow(alpha)
    score = score.view(-1, n_samples)
    best = score.argmax(dim=1)
    rows = torch.arange(score.size(0)) * n_samples + best
    return ys[rows], score.max(dim=1).values


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--docs", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--max-len", type=int, default=56)
    args = ap.parse_args()

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    model = Seq2Seq().eval()
    # bias the output layer so that EOS is rarely sampled early
    with torch.no_grad():
        model.decoder.out[-1].bias[EOS] = -4.0
    corpus = make_corpus(args.docs, 8000, gen)

    t0 = time.perf_counter()
    summaries, scores = [], []
    for i in range(0, len(corpus), args.batch):
        src = collate(corpus[i : i + args.batch])
        ys, logp, lengths = sample_summaries(
            model, src, args.samples, args.max_len, 0.9, 0.92, gen, args.fixed
        )
        best, best_score = rerank(ys, logp, lengths, args.samples)
        summaries.extend(best.unbind(0))
        scores.append(best_score)
    elapsed = time.perf_counter() - t0
    scores = torch.cat(scores)
    avg_len = sum(int((s != PAD).sum()) for s in summaries) / len(summaries)
    print(f"docs={len(summaries)} avg_len={avg_len:.1f} mean_score={scores.mean():.3f}")
    print(f"decode time {elapsed:.2f}s")


if __name__ == "__main__":
    main()

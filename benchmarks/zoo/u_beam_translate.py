"""Offline batch translation with a GRU attention encoder-decoder.

Reads a (synthetic) source corpus in length-sorted batches, runs batched beam
search (beam 5, GNMT length penalty) with the base model plus its fine-tuned
domain adapter, and reports a few detokenised hypotheses and the throughput.
No trained checkpoint ships with this demo: seeded random weights stand in for
one, so the hypotheses are gibberish but the compute is the real thing.
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]


# ----------------------------------------------------------------------------- data
class SubwordVocab:
    """SentencePiece-style pieces: '\u2581' marks the start of a word."""

    def __init__(self, size, seed=0):
        rng = np.random.default_rng(seed)
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        pieces, seen = list(SPECIALS), set(SPECIALS)
        while len(pieces) < size:
            lengths = rng.integers(1, 7, size=size)
            chars = letters[rng.integers(0, 26, size=(size, 6))]
            word_start = rng.random(size) < 0.6
            for n, row, ws in zip(lengths, chars, word_start):
                piece = ("\u2581" if ws else "") + "".join(row[:n])
                if piece not in seen and len(pieces) < size:
                    seen.add(piece)
                    pieces.append(piece)
        self.itos = pieces
        self.stoi = {p: i for i, p in enumerate(pieces)}

    def __len__(self):
        return len(self.itos)


def synthetic_corpus(n_sents, vocab_size, seed=1):
    """Zipf-distributed token ids, sentence lengths 5..40."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.gamma(3.0, 4.5, size=n_sents).astype(int), 5, 40)
    ranks = np.arange(1, vocab_size - len(SPECIALS) + 1)
    probs = 1.0 / ranks ** 1.1
    probs /= probs.sum()
    return [rng.choice(ranks, size=n, p=probs) + len(SPECIALS) - 1 for n in lengths]


def batch_iterator(corpus, batch_size):
    """Yield (indices, src, src_lengths), length-sorted to keep padding low."""
    order = sorted(range(len(corpus)), key=lambda i: len(corpus[i]))
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        lengths = torch.tensor([len(corpus[i]) + 1 for i in idx])
        src = torch.full((len(idx), int(lengths.max())), PAD, dtype=torch.long)
        for row, i in enumerate(idx):
            src[row, :lengths[row] - 1] = torch.from_numpy(corpus[i])
            src[row, lengths[row] - 1] = EOS
        yield idx, src, lengths


# ----------------------------------------------------------------------------- model
class Encoder(nn.Module):
    def __init__(self, vocab_size, emb_dim, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb_dim)
        self.rnn = nn.GRU(emb_dim, hidden // 2, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(hidden, hidden)

    def forward(self, src, src_lengths):
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(src), src_lengths, batch_first=True,
                                                   enforce_sorted=False)
        out, h_n = self.rnn(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        h0 = torch.tanh(self.bridge(torch.cat([h_n[0], h_n[1]], dim=-1)))
        return out, h0


class AttnDecoder(nn.Module):
    """Luong 'general' attention, input feeding, tied input/output embeddings."""

    def __init__(self, vocab_size, emb_dim, hidden):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb_dim)
        self.cell = nn.GRUCell(2 * emb_dim, hidden)
        self.attn_in = nn.Linear(hidden, hidden, bias=False)
        self.readout = nn.Linear(2 * hidden, emb_dim)
        self.out_bias = nn.Parameter(torch.zeros(vocab_size))

    def attention_keys(self, memory):
        return self.attn_in(memory)

    def step(self, prev_tokens, h, feed, memory, keys, src_mask):
        h = self.cell(torch.cat([self.embed(prev_tokens), feed], dim=-1), h)
        energy = torch.bmm(keys, h.unsqueeze(2)).squeeze(2).masked_fill(~src_mask, float("-inf"))
        ctx = torch.bmm(F.softmax(energy, dim=-1).unsqueeze(1), memory).squeeze(1)
        feed = torch.tanh(self.readout(torch.cat([h, ctx], dim=-1)))
        logits = F.linear(feed, self.embed.weight, self.out_bias)
        return logits, h, feed


class Seq2Seq(nn.Module):
    def __init__(self, vocab_size, src_emb_dim=256, tgt_emb_dim=512, hidden=512):
        super().__init__()
        self.encoder = Encoder(vocab_size, src_emb_dim, hidden)
        self.decoder = AttnDecoder(vocab_size, tgt_emb_dim, hidden)


class LoRA(nn.Module):
    """Low-rank adapter W + (alpha / r) * B @ A, registered as a parametrization
    so that `module.weight` (and weight tying) keep working unchanged."""

    def __init__(self, fan_out, fan_in, rank, alpha):
        super().__init__()
        self.lora_A = nn.Parameter(torch.empty(rank, fan_in))
        self.lora_B = nn.Parameter(torch.zeros(fan_out, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scale = alpha / rank

    def forward(self, weight):
        return weight + self.scale * (self.lora_B @ self.lora_A)


def add_adapters(model, rank, alpha):
    for module in list(model.modules()):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            parametrize.register_parametrization(module, "weight", LoRA(*module.weight.shape, rank, alpha))  # PLANTED


def load_model(vocab_size, seed, adapter_rank=64, adapter_alpha=128):
    """Base model plus the domain adapter it was fine-tuned with.

    A real job would load_state_dict() the base checkpoint and the adapter
    weights here; seeded random weights stand in for both.
    """
    torch.manual_seed(seed)
    model = Seq2Seq(vocab_size)
    for emb in (model.encoder.embed, model.decoder.embed):
        nn.init.normal_(emb.weight, std=0.1)
    add_adapters(model, adapter_rank, adapter_alpha)
    for name, param in model.named_parameters():
        if name.endswith("lora_B"):
            nn.init.normal_(param, std=0.02)  # a trained adapter is non-zero
    return model.eval()


# ----------------------------------------------------------------------------- search
class Translator:
    def __init__(self, model, vocab, beam_size=5, len_penalty=0.6, max_len_a=1.2, max_len_b=5):
        self.model, self.vocab = model, vocab
        self.beam_size, self.alpha = beam_size, len_penalty
        self.max_len_a, self.max_len_b = max_len_a, max_len_b

    def length_penalty(self, length):
        return ((5.0 + length) / 6.0) ** self.alpha

    def encode(self, src, src_lengths):
        """Run the encoder once per sentence, then tile its outputs over the beams."""
        k = self.beam_size
        memory, h = self.model.encoder(src, src_lengths)
        keys = self.model.decoder.attention_keys(memory)
        src_mask = torch.arange(src.size(1))[None, :] < src_lengths[:, None]
        return [x.repeat_interleave(k, 0) for x in (memory, keys, h, src_mask)]

    @torch.inference_mode()
    def beam_search(self, src, src_lengths):
        dec, k = self.model.decoder, self.beam_size
        B, S = src.shape
        memory, keys, h, src_mask = self.encode(src, src_lengths)
        N, max_len = B * k, int(self.max_len_a * S + self.max_len_b)
        feed = memory.new_zeros(N, dec.readout.out_features)
        tokens = torch.full((N, max_len + 1), PAD, dtype=torch.long)
        tokens[:, 0] = BOS
        scores = torch.zeros(B, k)
        scores[:, 1:] = float("-inf")  # beams start identical: keep one alive
        finished = torch.zeros(N, dtype=torch.bool)
        hyp_len = torch.zeros(N)
        offsets = (torch.arange(B) * k)[:, None]

        for t in range(max_len):
            logits, h, feed = dec.step(tokens[:, t], h, feed, memory, keys, src_mask)
            lprobs = F.log_softmax(logits, dim=-1)
            V = lprobs.size(1)
            lprobs[:, PAD] = float("-inf")
            if t == max_len - 1:
                lprobs[~finished] = float("-inf")
                lprobs[~finished, EOS] = 0.0
            # a finished hypothesis can only be extended by PAD, at no cost
            lprobs[finished] = float("-inf")
            lprobs[finished, PAD] = 0.0

            cand_len = torch.where(finished, hyp_len, torch.full_like(hyp_len, t + 1))
            raw = scores.view(N, 1) + lprobs
            norm = raw / self.length_penalty(cand_len)[:, None]
            _, top_idx = norm.view(B, -1).topk(k, dim=1)
            beam_idx = (top_idx // V + offsets).view(-1)
            word_idx = (top_idx % V).view(-1)

            scores = raw.view(-1)[beam_idx * V + word_idx].view(B, k)
            tokens = tokens[beam_idx]
            tokens[:, t + 1] = word_idx
            h, feed = h[beam_idx], feed[beam_idx]
            was_finished = finished[beam_idx]
            hyp_len = torch.where(was_finished, hyp_len[beam_idx], torch.full_like(hyp_len, t + 1))
            finished = was_finished | (word_idx == EOS)
            if bool(finished.all()):
                break

        final = scores / self.length_penalty(hyp_len.view(B, k))
        best = final.argmax(dim=1) + offsets[:, 0]
        return [tokens[i, 1:].tolist() for i in best.tolist()], final.max(dim=1).values

    def detokenize(self, ids):
        pieces = []
        for i in ids:
            if i == EOS or i == PAD:
                break
            pieces.append(self.vocab.itos[i])
        return "".join(pieces).replace("\u2581", " ").strip()

    def translate_batches(self, batches):
        for idx, src, lengths in batches:
            hyps, hyp_scores = self.beam_search(src, lengths)
            yield idx, hyps, hyp_scores


def main():
    parser = argparse.ArgumentParser(description="Batch beam-search translation (synthetic).")
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--len-penalty", type=float, default=0.6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()

    vocab = SubwordVocab(args.vocab_size, seed=args.seed)
    corpus = synthetic_corpus(args.sentences, len(vocab), seed=args.seed + 1)
    model = load_model(len(vocab), seed=args.seed)
    if args.fixed:
        for module in model.modules():
            if parametrize.is_parametrized(module):
                parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
    translator = Translator(model, vocab, beam_size=args.beam, len_penalty=args.len_penalty)

    outputs, n_tokens, n_src = {}, 0, 0
    start = time.perf_counter()
    for idx, hyps, hyp_scores in translator.translate_batches(batch_iterator(corpus, args.batch_size)):
        for i, hyp, s in zip(idx, hyps, hyp_scores.tolist()):
            text = translator.detokenize(hyp)
            outputs[i] = (text, s)
            n_tokens += hyp.index(EOS) + 1 if EOS in hyp else len(hyp)
            n_src += len(corpus[i])
    elapsed = time.perf_counter() - start

    for i in range(3):
        src_text = translator.detokenize(corpus[i].tolist())
        print(f"[{i}] src: {src_text[:70]}")
        print(f"    hyp: {outputs[i][0][:70]}  (score {outputs[i][1]:.4f})")
    mean_score = sum(s for _, s in outputs.values()) / len(outputs)
    print(f"mean best-hypothesis score {mean_score:.5f}")
    print(f"translated {len(outputs)} sentences ({n_src} src tokens, {n_tokens} tgt tokens) "
          f"in {elapsed:.2f}s: {n_tokens / elapsed:.1f} tgt tokens/s")


if __name__ == "__main__":
    main()

"""Synthetic corpus + masked-language-modelling collator."""
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset

PAD_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3
N_SPECIAL = 4


class SyntheticCorpus(Dataset):
    """Zipf-ish token streams with a little local structure (bigram drift),
    so the MLM objective is learnable.  Everything is generated up front."""

    def __init__(self, n_docs: int, seq_len: int, vocab_size: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        ranks = torch.arange(1, vocab_size - N_SPECIAL + 1, dtype=torch.float32)
        probs = 1.0 / ranks.pow(1.1)
        probs /= probs.sum()
        body = torch.multinomial(probs, n_docs * (seq_len - 2), replacement=True, generator=g)
        body = body.view(n_docs, seq_len - 2)
        # local structure: with p=0.3 a token repeats its left neighbour + 1
        copy = torch.rand(n_docs, seq_len - 2, generator=g) < 0.3
        shifted = torch.roll(body, 1, dims=1) + 1
        body = torch.where(copy, shifted.clamp_max(vocab_size - N_SPECIAL - 1), body)
        body = body + N_SPECIAL
        cls = torch.full((n_docs, 1), CLS_ID)
        sep = torch.full((n_docs, 1), SEP_ID)
        self.input_ids = torch.cat([cls, body, sep], dim=1).contiguous()

    def __len__(self):
        return self.input_ids.size(0)

    def __getitem__(self, idx):
        return {"input_ids": self.input_ids[idx]}


@dataclass
class DataCollatorForMLM:
    vocab_size: int
    mlm_probability: float = 0.15
    seed: int = 0

    def __post_init__(self):
        self.generator = torch.Generator().manual_seed(self.seed)

    def __call__(self, examples):
        input_ids = torch.stack([e["input_ids"] for e in examples]).clone()
        labels = input_ids.clone()
        g = self.generator
        prob = torch.full(labels.shape, self.mlm_probability)
        special = input_ids < N_SPECIAL
        prob.masked_fill_(special, 0.0)
        masked = torch.bernoulli(prob, generator=g).bool()
        labels[~masked] = -100
        # 80% -> [MASK], 10% -> random token, 10% -> unchanged
        replace = torch.bernoulli(torch.full(labels.shape, 0.8), generator=g).bool() & masked
        input_ids[replace] = MASK_ID
        rnd = torch.bernoulli(torch.full(labels.shape, 0.5), generator=g).bool() & masked & ~replace
        random_words = torch.randint(N_SPECIAL, self.vocab_size, labels.shape, generator=g)
        input_ids[rnd] = random_words[rnd]
        attention_mask = torch.ones_like(input_ids, dtype=torch.bool)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}

"""A small BERT-style sequence classifier whose forward returns a dict with the loss, as the
models of the common NLP libraries do (`outputs = model(**batch); outputs["loss"]`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class EncoderConfig:
    vocab_size: int = 4000
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 512
    max_position: int = 128
    num_labels: int = 3
    dropout: float = 0.1


class SelfAttention(torch.nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.heads = cfg.num_heads
        self.qkv = torch.nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.proj = torch.nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.drop = cfg.dropout

    def forward(self, x, attention_mask):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5
        scores = scores.masked_fill(~attention_mask[:, None, None, :], float("-inf"))
        probs = F.dropout(scores.softmax(-1), self.drop, self.training)
        return self.proj((probs @ v).transpose(1, 2).reshape(b, t, d))


class EncoderLayer(torch.nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.attn = SelfAttention(cfg)
        self.ln1 = torch.nn.LayerNorm(cfg.hidden_size)
        self.ffn = torch.nn.Sequential(torch.nn.Linear(cfg.hidden_size, cfg.intermediate_size), torch.nn.GELU(),
                                       torch.nn.Linear(cfg.intermediate_size, cfg.hidden_size))
        self.ln2 = torch.nn.LayerNorm(cfg.hidden_size)
        self.drop = torch.nn.Dropout(cfg.dropout)

    def forward(self, x, attention_mask):
        x = self.ln1(x + self.drop(self.attn(x, attention_mask)))
        return self.ln2(x + self.drop(self.ffn(x)))


class EncoderForSequenceClassification(torch.nn.Module):
    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.config = cfg
        self.tokens = torch.nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=0)
        self.positions = torch.nn.Embedding(cfg.max_position, cfg.hidden_size)
        self.ln = torch.nn.LayerNorm(cfg.hidden_size)
        self.layers = torch.nn.ModuleList([EncoderLayer(cfg) for _ in range(cfg.num_layers)])
        self.classifier = torch.nn.Linear(cfg.hidden_size, cfg.num_labels)

    def forward(self, input_ids, attention_mask, labels=None) -> dict:
        positions = torch.arange(input_ids.shape[1])
        x = self.ln(self.tokens(input_ids) + self.positions(positions))
        for layer in self.layers:
            x = layer(x, attention_mask)
        logits = self.classifier(torch.tanh(x[:, 0]))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = F.cross_entropy(logits, labels)
        return out

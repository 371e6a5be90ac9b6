"""A small BERT-style encoder with a tied masked-LM head."""
import math
import sys
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

_FIXED = "--fixed" in sys.argv


@dataclass
class ModelConfig:
    vocab_size: int = 16000
    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 256
    max_position: int = 512
    dropout: float = 0.0
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02


class Embeddings(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.word = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=0)
        self.position = nn.Embedding(cfg.max_position, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.drop = nn.Dropout(cfg.dropout)
        self.register_buffer("position_ids", torch.arange(cfg.max_position)[None], persistent=False)

    def forward(self, input_ids):
        pos = self.position_ids[:, : input_ids.size(1)]
        return self.drop(self.norm(self.word(input_ids) + self.position(pos)))


class Encoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            d_model=cfg.hidden_size, nhead=cfg.num_heads,
            dim_feedforward=cfg.intermediate_size, dropout=cfg.dropout,
            activation="gelu", batch_first=True, norm_first=False,
            layer_norm_eps=cfg.layer_norm_eps,
        )
        self.layers = nn.TransformerEncoder(layer, cfg.num_layers, enable_nested_tensor=False)

    def forward(self, hidden, attention_mask=None):
        pad_mask = None if attention_mask is None else ~attention_mask
        return self.layers(hidden, src_key_padding_mask=pad_mask)


class MLMHead(nn.Module):
    def __init__(self, cfg: ModelConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.transform = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.decoder = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.decoder.weight = word_embeddings.weight  # weight tying
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, hidden):
        h = self.norm(F.gelu(self.transform(hidden)))
        return self.decoder(h) + self.bias


class BertForMaskedLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)
        self.cls = MLMHead(cfg, self.embeddings.word)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(0.0, self.config.initializer_range)
            if isinstance(module, nn.Linear) and module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.data.fill_(1.0)
            module.bias.data.zero_()

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())

    def forward(self, input_ids, attention_mask=None, labels=None):
        hidden = self.encoder(self.embeddings(input_ids), attention_mask)
        if labels is not None and _FIXED:
            keep = labels != -100
            hidden, labels = hidden[keep], labels[keep]
        logits = self.cls(hidden)  # PLANTED
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits.view(-1, self.config.vocab_size), labels.reshape(-1), ignore_index=-100
            )
        return {"loss": loss, "logits": logits}

"""The review dataset: text in, token ids out."""

from __future__ import annotations

import torch
from tokenizer import WordPieceTokenizer
from torch.utils.data import Dataset


class ReviewDataset(Dataset):
    def __init__(self, reviews: list[tuple[str, int]], tokenizer: WordPieceTokenizer, pretokenize: bool = False):
        self.reviews = reviews
        self.tokenizer = tokenizer
        self.encoded = [tokenizer.encode(text) for text, _ in reviews] if pretokenize else None

    def __len__(self) -> int:
        return len(self.reviews)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        text, label = self.reviews[i]
        if self.encoded is not None:
            ids = self.encoded[i]
        else:
            ids = self.tokenizer.encode(text)  # PLANTED
        return torch.tensor(ids), torch.tensor(label)

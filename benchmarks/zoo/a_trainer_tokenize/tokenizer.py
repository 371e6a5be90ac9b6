"""A WordPiece tokenizer in plain Python, like the "slow" tokenizers of NLP libraries."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter

_WORD = re.compile(r"\w+|[^\w\s]")


class WordPieceTokenizer:
    def __init__(self, vocab: list[str], max_len: int = 128):
        self.vocab = {tok: i for i, tok in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *vocab])}
        self.max_len = max_len

    @classmethod
    def train(cls, texts: list[str], size: int = 2000, max_len: int = 128) -> WordPieceTokenizer:
        counts: Counter[str] = Counter()
        for text in texts:
            for word in _WORD.findall(cls.normalize(text)):
                counts[word] += 1
                for i in range(2, len(word), 2):
                    counts["##" + word[i:i + 2]] += 1
        return cls([tok for tok, _ in counts.most_common(size)], max_len)

    @staticmethod
    def normalize(text: str) -> str:
        """Drop control characters, lower-case, strip accents, pad punctuation with spaces."""
        out = []
        for ch in unicodedata.normalize("NFD", text.lower()):
            cat = unicodedata.category(ch)
            if cat == "Mn" or (cat.startswith("C") and ch not in "\t\n\r"):
                continue
            if cat.startswith("P") or (33 <= ord(ch) <= 47):
                out.extend((" ", ch, " "))
            else:
                out.append(" " if ch.isspace() else ch)
        return "".join(out)

    def wordpiece(self, word: str) -> list[int]:
        """Greedy longest-match-first split of one word into vocabulary pieces."""
        pieces, start = [], 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    pieces.append(self.vocab[piece])
                    break
                end -= 1
            else:
                return [self.vocab["[UNK]"]]
            start = end
        return pieces

    def encode(self, text: str) -> list[int]:
        ids = [self.vocab["[CLS]"]]
        for word in _WORD.findall(self.normalize(text)):
            ids.extend(self.wordpiece(word))
        ids = ids[:self.max_len - 1] + [self.vocab["[SEP]"]]
        return ids + [self.vocab["[PAD]"]] * (self.max_len - len(ids))

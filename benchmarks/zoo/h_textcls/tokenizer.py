"""Simple whitespace/punctuation word tokenizer with a frequency-ranked vocab."""
import re
from collections import Counter

_TOKEN_RE = re.compile(r"[a-z]+|[0-9]+|[^\sa-z0-9]")


class WordTokenizer:
    PAD, UNK = "<pad>", "<unk>"

    def __init__(self, max_vocab=30000, min_freq=1, lowercase=True, fast_lookup=False):
        self.max_vocab = max_vocab
        self.min_freq = min_freq
        self.lowercase = lowercase
        self.fast_lookup = fast_lookup
        self.itos = [self.PAD, self.UNK]
        self.stoi = {}

    @property
    def pad_id(self):
        return 0

    @property
    def unk_id(self):
        return 1

    def __len__(self):
        return len(self.itos)

    def split(self, text):
        if self.lowercase:
            text = text.lower()
        return _TOKEN_RE.findall(text)

    def fit(self, texts):
        counts = Counter()
        for t in texts:
            counts.update(self.split(t))
        for word, c in counts.most_common(self.max_vocab - len(self.itos)):
            if c < self.min_freq:
                break
            self.itos.append(word)
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        return self

    def token_to_id(self, tok):
        if self.fast_lookup:
            return self.stoi.get(tok, self.unk_id)
        try:
            return self.itos.index(tok)  # PLANTED
        except ValueError:
            return self.unk_id

    def encode(self, text, max_len=None):
        ids = [self.token_to_id(t) for t in self.split(text)]
        if max_len is not None:
            ids = ids[:max_len]
        return ids

    def decode(self, ids):
        return " ".join(self.itos[i] for i in ids if i != self.pad_id)

"""Greedy generation with a small Transformer that is fed the whole sequence for every new token."""
import torch

torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=256, batch_first=True)
body = torch.nn.TransformerEncoder(layer, num_layers=2).eval()
embed, head = torch.nn.Embedding(100, 128), torch.nn.Linear(128, 100)


class LM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.body, self.head = embed, body, head

    def forward(self, ids):
        return self.head(self.body(self.embed(ids)))


lm = LM().eval()
seq = torch.randint(0, 100, (2, 8))
with torch.inference_mode():
    for _ in range(120):
        logits = lm(seq)  # PLANTED
        seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
print("generated", seq.shape)

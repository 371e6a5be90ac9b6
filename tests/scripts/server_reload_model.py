"""A ranking service that loads its model checkpoint again for every request, three calls below
the loop that serves them (serve -> handle -> _get_model -> _load_model)."""
import io
import sys

import torch

CKPT = io.BytesIO()
torch.save(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1)).state_dict(), CKPT)


class Server:
    def _load_model(self):
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
        CKPT.seek(0)
        model.load_state_dict(torch.load(CKPT))
        return model.eval()

    def _get_model(self):
        return self._load_model()  # PLANTED

    @torch.no_grad()
    def handle(self, docs):
        model = self._get_model()  # GETS
        return model(docs).squeeze(-1).topk(5).indices

    def serve(self, requests):
        return [self.handle(docs) for docs in requests]


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    out = Server().serve(torch.randn(64, 256) for _ in range(n))
    print("served", len(out))

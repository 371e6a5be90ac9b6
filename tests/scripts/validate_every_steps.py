"""A training loop that evaluates the whole validation set every 5 steps, from a callback called
after every step (the `if` deciding when lives in the callback). `--fixed` evaluates once at the
end."""
import sys

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
val = [(torch.randn(512, 64), torch.randint(0, 4, (512,))) for _ in range(12)]
EVAL_EVERY = 5


def evaluate() -> float:
    with torch.no_grad():
        return sum(float(torch.nn.functional.cross_entropy(model(x), y)) for x, y in val) / len(val)


class Logger:
    def __init__(self) -> None:
        self.curve: list[float] = []

    def on_step_end(self, step: int) -> None:
        if step % EVAL_EVERY == 0 and "--fixed" not in sys.argv:
            self.curve.append(evaluate())  # PLANTED


logger = Logger()
for step in range(1, 151):
    x, y = torch.randn(64, 64), torch.randint(0, 4, (64,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    logger.on_step_end(step)
print(evaluate(), len(logger.curve))

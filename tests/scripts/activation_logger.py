"""Trains a small MLP classifier and logs each layer's mean activation. The logger attaches a
forward hook to every layer at every batch and never removes it (PLANTED): batch k runs k copies
of each hook. Two things that are not piles stay in: a setup loop registering two hooks on one
module at start, and a hook on each step's fresh loss tensor (it dies with the tensor)."""
import sys

import torch


class ActivationLogger:
    def __init__(self):
        self.means = {}

    def hook_for(self, name):
        def hook(module, inputs, output):
            self.means[name] = output.detach().abs().mean()
        return hook

    def attach(self, model):
        for name, layer in model.named_children():
            layer.register_forward_hook(self.hook_for(name))


def main():
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()) for _ in range(6)],
                                torch.nn.Linear(64, 10))
    for probe in (lambda m, i, o: None, lambda m, i, o: None):  # two hooks on the head, once
        model[-1].register_forward_hook(probe)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    logger = ActivationLogger()
    fixed = "--fixed" in sys.argv
    if fixed:
        logger.attach(model)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    for step in range(300):
        if not fixed:
            logger.attach(model)  # PLANTED
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.register_hook(lambda g: g)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"loss {loss.item():.4f}, {len(logger.means)} layers logged")


if __name__ == "__main__":
    main()

"""Bookkeeping of episode returns in a method, one environment at a time (a vectorised RL loop):
a Python loop of tiny tensor updates, found at its `for` line, not at the method's `def`."""
import torch


class Tracker:
    def __init__(self, n):
        self.ret = torch.zeros(n)

    def update(self, reward, done):
        for i in range(len(done)):  # PLANTED
            self.ret[i] += reward[i]
            if done[i]:
                self.ret[i] = 0.0


torch.manual_seed(0)
tracker = Tracker(512)
for step in range(250):
    tracker.update(torch.rand(512), torch.rand(512) > 0.9)
print(f"{tracker.ret.sum():.2f}")

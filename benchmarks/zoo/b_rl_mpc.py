"""Model-predictive control of a two-link arm (PETS-style): a learned dynamics model and a CEM planner.

The arm is a NumPy environment stepped once per control step. A residual dynamics MLP is fitted
on random transitions first; then at every step the cross-entropy method samples 1024 action
sequences, rolls them through the model for 12 steps and executes the first action of the best.
"""
import argparse

import numpy as np
import torch
from torch import nn


class Arm:
    """A planar two-link arm; the state is (q1, q2, dq1, dq2), the action a torque per joint."""

    def __init__(self, seed=0):
        self.rng = np.random.default_rng(seed)
        self.state = np.concatenate([self.rng.uniform(-np.pi, np.pi, 2), np.zeros(2)])
        self.target = np.array([1.2, 0.8])

    @staticmethod
    def physics(state, torque):
        q, dq = state[..., :2], state[..., 2:]
        dq = 0.95 * dq + 0.1 * np.clip(torque, -1, 1) - 0.02 * np.sin(q)
        return np.concatenate([q + 0.1 * dq, dq], -1)

    def step(self, torque):
        self.state = self.physics(self.state, torque)
        return self.state, -np.linalg.norm(tip(torch.as_tensor(self.state)).numpy() - self.target)


def tip(state):
    q1, q12 = state[..., 0], state[..., 0] + state[..., 1]
    return torch.stack([torch.cos(q1) + torch.cos(q12), torch.sin(q1) + torch.sin(q12)], -1)


def as_tensor(x):
    return torch.as_tensor(x, dtype=torch.get_default_dtype())


class Dynamics(nn.Module):
    """Predicts the change of state from (state, action)."""

    def __init__(self, hidden=256):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, 4))

    def forward(self, state, action):
        return state + self.net(torch.cat([state, action], -1))


def fit(model, n=20000, steps=300, lr=0.05, seed=1):
    """Least-squares fit on random transitions, by plain minibatch gradient descent."""
    rng = np.random.default_rng(seed)
    s = np.concatenate([rng.uniform(-np.pi, np.pi, (n, 2)), rng.normal(0, 0.5, (n, 2))], 1)
    a = rng.uniform(-1, 1, (n, 2))
    s, a, s_next = as_tensor(s), as_tensor(a), as_tensor(Arm.physics(s, a))
    for _ in range(steps):
        idx = torch.randint(0, n, (1024,))
        loss = (model(s[idx], a[idx]) - s_next[idx]).pow(2).mean()
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    return loss.item()


@torch.no_grad()
def plan(model, state, target, horizon=12, pop=1024, elites=64, iters=3):
    mean = torch.zeros(horizon, 2)
    std = torch.ones(horizon, 2)
    start = as_tensor(state).expand(pop, -1)
    goal = as_tensor(target)
    for _ in range(iters):
        actions = (mean + std * torch.randn(pop, horizon, 2)).clamp(-1, 1)
        s, cost = start, torch.zeros(pop)
        for t in range(horizon):
            s = model(s, actions[:, t])
            cost = cost + (tip(s) - goal).norm(dim=-1)
        best = actions[cost.topk(elites, largest=False).indices]
        mean, std = best.mean(0), best.std(0) + 1e-3
    return mean[0].numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--fixed", action="store_true", help="keep torch's float32 default")
    args = ap.parse_args()
    if not args.fixed:
        torch.set_default_dtype(torch.float64)  # PLANTED
    torch.manual_seed(0)
    model = Dynamics()
    print(f"dynamics model fitted, mse {fit(model):.5f}")
    env = Arm()
    for step in range(args.steps):
        action = plan(model, env.state, env.target)
        state, reward = env.step(action)
        if step % 5 == 0:
            print(f"step {step} distance to target {-reward:.3f}")


if __name__ == "__main__":
    main()

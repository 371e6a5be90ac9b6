"""Full-batch LBFGS fit of a small MLP surrogate, driven by a callback system.

The script fits a tanh MLP to noisy samples of a 2-D response surface
(a damped travelling wave).  Training is organised like a tiny framework:

  * `SurfaceData`   - builds the dataset (numpy RNG -> float32 tensors),
  * `Surrogate`     - the MLP,
  * `Objective`     - data loss + L2 penalty, evaluated inside the LBFGS
                      closure,
  * `Callback` / `CallbackList` - events fired by the trainer:
                      train_begin, closure_begin, closure_end, step_end,
  * `GradNormMonitor` - records per-parameter gradient norms through
                      tensor backward hooks,
  * `History`       - keeps the loss curve and prints progress,
  * `Trainer`       - owns the optimizer and builds the closure.

Planted problem: `GradNormMonitor` attaches its tensor hooks
(`Tensor.register_hook`) from its `closure_begin` handler, i.e. on every
evaluation of the LBFGS closure, and the returned handles are never removed.
Hooks therefore pile up on each parameter: backward pass number k runs k
copies of every hook, so the hook work grows quadratically over the run and
soon dominates the backward pass.  The recorded numbers are unaffected (every
copy writes the same value), so nothing looks wrong except the speed.  With
`--fixed` the hooks are attached once, at `train_begin`.
"""

import sys
import time

import numpy as np
import torch
from torch import nn

FIXED = "--fixed" in sys.argv

N_POINTS = 2048
HIDDEN = 48
DEPTH = 4
OUTER_STEPS = 32
LBFGS_ITERS = 20
WEIGHT_DECAY = 1e-5
LOG_EVERY = 10


class SurfaceData:
    def __init__(self, n, noise=0.02, seed=0):
        rng = np.random.default_rng(seed)
        xt = rng.uniform(-1.0, 1.0, size=(n, 2))
        x, t = xt[:, 0], xt[:, 1]
        u = np.exp(-1.5 * (t + 1.0)) * np.sin(4.0 * np.pi * (x - 0.3 * t)) + 0.2 * x * t
        u = u + rng.normal(0.0, noise, size=n)
        self.inputs = torch.from_numpy(xt.astype(np.float32))
        self.targets = torch.from_numpy(u.astype(np.float32)).unsqueeze(1)


class Surrogate(nn.Module):
    def __init__(self, hidden, depth):
        super().__init__()
        layers, width = [], 2
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.Tanh()]
            width = hidden
        layers.append(nn.Linear(width, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class Objective:
    def __init__(self, model, data, weight_decay):
        self.model = model
        self.data = data
        self.weight_decay = weight_decay

    def __call__(self):
        pred = self.model(self.data.inputs)
        mse = nn.functional.mse_loss(pred, self.data.targets)
        l2 = sum(p.pow(2).sum() for p in self.model.parameters())
        return mse + self.weight_decay * l2, mse


class Callback:
    def on_train_begin(self, trainer):
        pass

    def on_closure_begin(self, trainer):
        pass

    def on_closure_end(self, trainer, loss):
        pass

    def on_step_end(self, trainer, step):
        pass


class CallbackList:
    def __init__(self, callbacks):
        self.callbacks = list(callbacks)

    def fire(self, event, *args):
        for cb in self.callbacks:
            getattr(cb, "on_" + event)(*args)


class GradNormMonitor(Callback):
    def __init__(self):
        self.norms = {}
        self.handles = []

    def _make_hook(self, name):
        def hook(grad):
            self.norms[name] = grad.detach().norm()
        return hook

    def attach(self, model):
        for name, p in model.named_parameters():
            self.handles.append(p.register_hook(self._make_hook(name)))

    def on_train_begin(self, trainer):
        if FIXED:
            self.attach(trainer.model)

    def on_closure_begin(self, trainer):
        if not FIXED:
            self.attach(trainer.model)  # PLANTED: hooks re-attached on every closure call and never removed

    def summary(self):
        return {k: float(v) for k, v in self.norms.items()}


class History(Callback):
    def __init__(self, monitor, log_every):
        self.monitor = monitor
        self.log_every = log_every
        self.closure_losses = []
        self.step_losses = []
        self.evals = 0

    def on_closure_end(self, trainer, loss):
        self.evals += 1
        self.closure_losses.append(loss.detach())

    def on_step_end(self, trainer, step):
        self.step_losses.append(float(self.closure_losses[-1]))
        if step % self.log_every == 0:
            norms = self.monitor.summary()
            biggest = max(norms, key=norms.get)
            print(f"step {step:3d}  evals {self.evals:5d}  loss {self.step_losses[-1]:.6f}"
                  f"  max|g| {norms[biggest]:.3e} ({biggest})")


class Trainer:
    def __init__(self, model, objective, callbacks, lbfgs_iters):
        self.model = model
        self.objective = objective
        self.callbacks = CallbackList(callbacks)
        self.optimizer = torch.optim.LBFGS(
            model.parameters(), lr=1.0, max_iter=lbfgs_iters, history_size=20,
            tolerance_grad=0.0, tolerance_change=0.0)

    def make_closure(self):
        def closure():
            self.callbacks.fire("closure_begin", self)
            self.optimizer.zero_grad()
            loss, mse = self.objective()
            loss.backward()
            self.callbacks.fire("closure_end", self, mse)
            return loss
        return closure

    def fit(self, steps):
        self.callbacks.fire("train_begin", self)
        closure = self.make_closure()
        for step in range(1, steps + 1):
            self.optimizer.step(closure)
            self.callbacks.fire("step_end", self, step)


def main():
    torch.manual_seed(0)
    data = SurfaceData(N_POINTS)
    model = Surrogate(HIDDEN, DEPTH)
    monitor = GradNormMonitor()
    history = History(monitor, LOG_EVERY)
    trainer = Trainer(model, Objective(model, data, WEIGHT_DECAY), [monitor, history], LBFGS_ITERS)

    t0 = time.perf_counter()
    trainer.fit(OUTER_STEPS)
    elapsed = time.perf_counter() - t0

    with torch.no_grad():
        final_mse = float(nn.functional.mse_loss(model(data.inputs), data.targets))
        param_sum = sum(float(p.abs().sum()) for p in model.parameters())
    print(f"closure evals {history.evals}  train time {elapsed:.2f}s")
    print(f"final mse {final_mse:.6f}")
    print(f"checksum {param_sum + final_mse:.4f}")


if __name__ == "__main__":
    main()

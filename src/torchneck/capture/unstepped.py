"""Gradients the program computes for parameters that no optimizer updates: a "frozen" backbone
left out of the optimizer but still `requires_grad=True` (a linear probe), or a module's
parameters forgotten in the optimizer. Backward then runs through that part of the model, and
keeps its activations, for gradients nothing reads.

At each optimizer's first step (a post hook, after the backward), the parameters of the model
the step trained (the last top-level modules whose calls built a graph, from the autograd probe's
`RememberedCall`: an encoder and the head called on its output) that hold a gradient but are in
no optimizer stepped so far are noted (by id,
name and size: the model may be gone at the end); a later optimizer's first step takes its own
back (a GAN's two optimizers each step their own half). What is left at the end is unstepped
(diagnose/rules/autograd.py's `unstepped_gradients`)."""

from __future__ import annotations

from typing import Any

from .dynamo_guard import is_compiling

OPTIMIZERS_KEPT = 16
"""Optimizers whose first step is looked at (each removes its own parameters from the unstepped)."""
NAMES_KEPT = 5
"""Names of unstepped parameters kept for the finding."""


class UnsteppedGradients:
    def __init__(self, calls: Any) -> None:
        self._calls = calls  # autograd_probe.RememberedCall: `trained_modules()` are the model
        self._checked: set[int] = set()  # the optimizers that stepped once
        self._stepped_ids: set[int] = set()  # their parameters
        self._candidates: dict[int, tuple[str, int]] = {}  # id -> (name, numel): a gradient no optimizer steps
        self._with_grad_numel = 0
        self._module = ""
        self._handle: Any = None

    def install(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handle = register_optimizer_step_post_hook(self._stepped)

    def uninstall(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _stepped(self, optimizer, args, kwargs) -> None:
        if is_compiling():  # dynamo inlines the hook: nothing of it runs
            return
        try:
            key = id(optimizer)
            if key in self._checked or len(self._checked) >= OPTIMIZERS_KEPT:
                return
            self._checked.add(key)
            modules = self._calls.trained_modules()
            if not modules:
                return
            mine = {id(p) for group in optimizer.param_groups for p in group["params"]}
            self._stepped_ids |= mine
            for key in mine & self._candidates.keys():  # another optimizer's (a GAN's second half)
                del self._candidates[key]
            with_grad, seen = 0, set()
            for module in modules:
                for name, p in module.named_parameters():
                    if not p.requires_grad or p.grad is None or id(p) in seen:
                        continue
                    seen.add(id(p))
                    with_grad += p.numel()
                    if id(p) not in self._stepped_ids and id(p) not in self._candidates:
                        self._candidates[id(p)] = (f"{type(module).__name__}.{name}", p.numel())
            if with_grad > self._with_grad_numel:
                self._with_grad_numel = with_grad
                self._module = " + ".join(type(m).__qualname__ for m in modules)
        except Exception:  # the program's optimizer step must never fail here
            pass

    def summary(self) -> dict | None:
        """The noted parameters no optimizer seen updates: how many, their elements, a few names,
        and the elements of all the trained model's parameters that held a gradient; None when
        no optimizer stepped or every gradient was stepped."""
        left = list(self._candidates.values())
        if not self._checked or not left:
            return None
        return {"module": self._module, "params": len(left), "numel": sum(n for _, n in left),
                "with_grad_numel": self._with_grad_numel, "names": [name for name, _ in left[:NAMES_KEPT]]}

"""What autograd costs the script's model calls, measured: the capture keeps one of the
top-level module calls that built an autograd graph, and after the script has ended the probe
calls that module again with the same inputs, interleaved, with autograd on and under
`torch.inference_mode()`, and records the fastest call of each.

No constant says what grad mode costs a forward pass: recording the graph and keeping the
activations is ~10 % of a small MLP's call, while `nn.TransformerEncoder` and
`nn.MultiheadAttention` take their inference fast path (nested tensors that skip the padding,
fused attention) only with autograd off, which halved the zoo's padded batches. The probe re-runs
the program's own call, so the `autograd_in_inference` finding carries that call's figure.

Which call: one drawn in proportion to the time the calls took (weighted reservoir sampling:
each call replaces the kept one with probability its seconds / all the calls' seconds so far).
Calls differ (a batch padded to 40 tokens lost 25 % to autograd in the zoo's server, one padded
to 256 lost 85 %); drawn that way, the kept call's ratio is on average the ratio of all the
calls' time, and an embedding or a head called beside the model is rarely the one kept.

Keeping is a reference, never a copy: the module and the call's `args` / `kwargs` (the same
tensors); an optimizer step forgets it (that call was a training step's). Inputs on an
accelerator hold the module only weakly: a program that frees one model to load the next must
get its device memory back (no probe then, when the model is gone by the end). The probe runs
only at the end of `torchneck run`, when the script is over and re-calling its model cannot
change its results (not under `torchneck.profile()`, whose program goes on), and never once
anything was compiled (a grad-mode change recompiles).
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import random
import sys
import time
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from .dynamo_guard import is_compiling

MAX_CALL_S = 2.0
"""A call with autograd on slower than this is not probed: the probe (two rounds at least) would
add over 5 s to the run. The zoo's padded Transformer batches take 0.15-0.6 s a call on an idle
core, and 1-2 s on a loaded one."""
BUDGET_S = 1.0
"""No round starts once the probe has taken this long (after `MIN_ROUNDS`)."""
MIN_ROUNDS = 2
"""Rounds of (autograd on, inference mode) always run: the fastest of two leaves out the first
inference-mode call's one-time costs (its first dispatch of the fast path's kernels)."""
MAX_ROUNDS = 3
"""At most this many rounds: the probe's time stays about two seconds for the zoo's slowest call."""


OUTPUT_TENSORS_LOOKED_AT = 8
"""How many of a tuple's, list's or dict's first items are looked at for a tensor with a graph
(a model returns its loss and logits first; a long list of outputs is not searched)."""


def graph_of(output: Any):
    """The `grad_fn` of the first tensor with one in a module call's output: the output itself,
    or among the first items of a tuple, list, mapping (a Hugging Face `ModelOutput` is a dict)
    or dataclass (a model's own output record); None otherwise. Never raises: outputs are the
    program's own objects, and a common `ModelOutput` idiom (`__getattr__ = dict.__getitem__`)
    answers a missing attribute with KeyError, which once broke the program's forward."""
    import torch

    try:
        if isinstance(output, torch.Tensor):
            return output.grad_fn
        items: Iterable[Any]
        if isinstance(output, (tuple, list)):
            items = output
        elif isinstance(output, Mapping):
            items = output.values()
        elif dataclasses.is_dataclass(output) and not isinstance(output, type):
            items = (getattr(output, f.name, None) for f in dataclasses.fields(output))
        else:
            return None
        for value in itertools.islice(items, OUTPUT_TENSORS_LOOKED_AT):
            if isinstance(value, torch.Tensor) and value.grad_fn is not None:
                return value.grad_fn
    except Exception:
        pass
    return None


def builds_graph(output: Any) -> bool:
    """Whether a module call's output carries an autograd graph (`graph_of`)."""
    return graph_of(output) is not None


class RememberedCall:
    """One of the top-level module calls whose output required grad, drawn by their time (the
    capture's module hooks offer each, from any thread: a race only skews a draw's weights), and
    the probe that times it again once the script is over."""

    SITES_KEPT = 8
    """Lines of the user's code counted for the calls since the last optimizer step."""
    MODULES_KEPT = 8
    """Distinct top-level modules remembered (weakly) as the trained model's parts."""

    def __init__(self) -> None:
        self._call: tuple[Any, tuple, dict] | None = None  # (module or a weakref to it, args, kwargs)
        self._seen_s = 0.0  # the seconds of every call offered since the last forget()
        self._calls = self._chained = 0  # since the last forget(): calls, and those fed a tensor with a graph
        self._reached = [0]  # since the last forget(): calls whose graph a backward went through
        self._sites: dict[tuple[str, int, str], int] = {}
        self._recent: dict[int, weakref.ref] = {}  # the last modules whose calls built a graph (not forgotten)
        self._draw = random.Random(0)  # its own: the script's random state is left alone
        self._follow: tuple = ()  # (its class, the class's own __call__ or None) while one is followed

    def remember(self, module, args: tuple, kwargs: dict | None, seconds: float, output: Any = None) -> None:
        """A top-level call whose output has a grad_fn, which took `seconds`: keep references to
        it with probability `seconds` / all the calls' seconds so far (a few µs). Counted too,
        until the next optimizer step: the call, whether an input already carried a graph (the
        previous call's output fed back: every call's graph then stays alive until the last), the
        user's line that made it, and whether a backward later goes through its output's graph
        (a hook on its `grad_fn`)."""
        self._seen_s += seconds
        self._calls += 1
        self._note_call(args, kwargs, output)
        if id(module) not in self._recent:
            try:
                if len(self._recent) >= self.MODULES_KEPT:
                    del self._recent[next(iter(self._recent))]  # the oldest
                self._recent[id(module)] = weakref.ref(module)
            except TypeError:
                pass
        if self._call is not None and self._draw.random() * self._seen_s >= seconds:
            return
        held = weakref.ref(module) if _device_of(args, kwargs) is not None else module
        self._call = (held, args, kwargs or {})

    def _note_call(self, args: tuple, kwargs: dict | None, output: Any) -> None:
        import torch

        try:
            inputs = (*args[:OUTPUT_TENSORS_LOOKED_AT], *list((kwargs or {}).values())[:OUTPUT_TENSORS_LOOKED_AT])
            if any(isinstance(v, torch.Tensor) and v.grad_fn is not None for v in inputs):
                self._chained += 1
            graph = graph_of(output)
            if graph is not None:
                reached, done = self._reached, [False]

                def went_through(grad_outputs):
                    if not done[0]:
                        done[0] = True
                        reached[0] += 1

                graph.register_prehook(went_through)
            from .call_inputs import user_frame

            where = user_frame(sys._getframe(2))
            if where is not None and (where in self._sites or len(self._sites) < self.SITES_KEPT):
                self._sites[where] = self._sites.get(where, 0) + 1
        except Exception:
            pass

    def since_last_step(self) -> dict[str, Any]:
        """The calls that built a graph since the last optimizer step (all of them in a program
        that never stepped one): how many, their seconds, how many were fed a graph, how many
        graphs a backward went through, and the lines that made them, most calls first."""
        return {"calls": self._calls, "seconds": round(self._seen_s, 6), "chained": self._chained,
                "backward_reached": self._reached[0],
                "sites": [{"file": f, "line": ln, "function": fn, "calls": n}
                          for (f, ln, fn), n in sorted(self._sites.items(), key=lambda kv: -kv[1])]}

    def forget(self) -> None:
        """An optimizer step: the remembered call was a training step's."""
        self._call = None
        self._seen_s = 0.0
        self._calls = self._chained = 0
        self._reached = [0]  # a hook of an older call counts into the list it was given
        self._sites = {}

    def trained_modules(self) -> list:
        """The last few distinct top-level modules whose calls built a graph, still alive: the
        model an optimizer step trains (a frozen encoder and the head called on its output are two)."""
        return [m for m in (ref() for ref in self._recent.values()) if m is not None]

    def module(self):
        if self._call is None:
            return None
        held = self._call[0]
        return held() if isinstance(held, weakref.ref) else held

    def follow(self) -> None:
        """The capture's global module hooks are going (a better step clock began): go on
        remembering the calls of the remembered module (an evaluation after a few training steps)
        through its class's `__call__`, wrapped. Not a hook on the module itself: hooks live in
        the instance's state, which `copy.deepcopy(model)` (an EMA's snapshot) and
        `torch.save(model)` copy, and torchneck's could not be copied or pickled; a class is
        copied and pickled by reference. Calls of other instances of the class pass straight on."""
        module = self.module()
        if module is None or self._follow:
            return
        cls = type(module)
        own, original, probe, followed = cls.__dict__.get("__call__"), cls.__call__, self, weakref.ref(module)

        def __call__(mod, *args, **kwargs):
            if is_compiling() or mod is not followed():
                return original(mod, *args, **kwargs)
            began = time.perf_counter()
            output = original(mod, *args, **kwargs)
            if builds_graph(output):
                probe.remember(mod, args, kwargs, time.perf_counter() - began, output)
            return output

        try:
            setattr(cls, "__call__", __call__)  # noqa: B010  (a class attribute patched)
        except (TypeError, AttributeError):  # a class that refuses it: nothing to follow
            return
        self._follow = (cls, own)

    def unfollow(self) -> None:
        if not self._follow:
            return
        cls, own = self._follow
        self._follow = ()
        if own is None:
            delattr(cls, "__call__")
        else:
            setattr(cls, "__call__", own)  # noqa: B010

    def probe(self) -> dict | None:
        """Time the remembered call again, with autograd on and under inference mode (after the
        script: its results are written). None when no call is remembered; a dict with `skipped`
        or `error` when it could not be timed. The references are dropped either way."""
        self.unfollow()
        module, call, self._call = self.module(), self._call, None
        if call is None:
            return None
        since = {"since_last_step": self.since_last_step()}
        if module is None:
            return {"skipped": "the model was freed before the script ended", **since}
        _, args, kwargs = call
        try:  # what the model prints when called again is not the program's output
            with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                return {**_time_call(module, args, kwargs), **since}
        except Exception as exc:  # the probe must never fail the run
            return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:200], **since}


def _device_of(args: tuple, kwargs: dict | None):
    """The device of the first input tensor not in host memory, else None."""
    import torch

    for value in (*args, *(kwargs or {}).values()):
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            return value.device
    return None


def _time_call(module, args: tuple, kwargs: dict) -> dict:
    """Rounds of one call with autograd on and one under inference mode, outputs discarded;
    the module's training flag is left as it is. Synchronizes around each call when the inputs
    are on an accelerator (its kernels run asynchronously)."""
    import torch

    device = _device_of(args, kwargs)
    backend = getattr(torch, device.type, None) if device is not None else None
    sync = backend.synchronize if backend is not None and hasattr(backend, "synchronize") else None

    def timed(mode) -> float:
        with mode():
            if sync:
                sync(device)
            t0 = time.perf_counter()
            out = module(*args, **kwargs)
            if sync:
                sync(device)
            seconds = time.perf_counter() - t0
        del out
        return seconds

    began = time.perf_counter()
    with_grad: list[float] = []
    inference: list[float] = []
    while len(with_grad) < MAX_ROUNDS:
        with_grad.append(timed(torch.enable_grad))
        if with_grad[-1] > MAX_CALL_S:
            return {"skipped": f"a call takes {with_grad[-1]:.2f} s (over {MAX_CALL_S:g} s)"}
        inference.append(timed(torch.inference_mode))
        if len(with_grad) >= MIN_ROUNDS and time.perf_counter() - began > BUDGET_S:
            break
    grad_s, inference_s = min(with_grad), min(inference)
    out = {"module": type(module).__qualname__, "training": module.training,
           "device": str(device) if device is not None else "cpu", "rounds": len(with_grad),
           "seconds_with_grad": grad_s, "seconds_inference_mode": inference_s,
           "inference_over_grad": inference_s / grad_s if grad_s > 0 else None}
    out["probe_s"] = round(time.perf_counter() - began, 4)
    return out

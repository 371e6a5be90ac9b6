"""Where the user's code configured something slow: the line that built each optimizer, turned
on anomaly detection, set the number of threads, called torch.compile, or brought float64 data
into torch.

A trace shows the cost (an optimizer step, slow backward ops) but not the line to change; these
calls happen once, so wrapping them costs nothing measurable. Each record carries the deepest
user frame at the call and the settings that matter for the findings.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

from ..sites import is_user_file

MAX_RECORDS = 200


def user_frames(frame: types.FrameType | None, count: int = 1) -> list[dict]:
    """The first `count` frames of the user's code from `frame` outwards, as file, line, function."""
    found: list[dict] = []
    while frame is not None and len(found) < count:
        code = frame.f_code
        if is_user_file(code.co_filename):
            found.append({"file": code.co_filename, "line": frame.f_lineno,
                          "function": getattr(code, "co_qualname", code.co_name)})
        frame = frame.f_back
    return found


def _user_frame(depth: int = 2) -> dict | None:
    found = user_frames(sys._getframe(depth))
    return found[0] if found else None


class CallSites:
    """Wraps the few configuration calls; `records` lists what the user's code called, where."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self._restore: list[tuple] = []

    def _add(self, what: str, **details) -> None:
        if len(self.records) >= MAX_RECORDS:
            return
        where = _user_frame(3)
        if where is not None:
            self.records.append({"what": what, **where, **details})

    def install(self) -> None:
        import torch
        from torch.autograd import anomaly_mode

        sites = self
        opt_init = torch.optim.Optimizer.__init__

        def optimizer_init(opt, params, defaults, *args, **kwargs):
            opt_init(opt, params, defaults, *args, **kwargs)
            try:
                params = [p for g in opt.param_groups for p in g["params"]]
                sites._add("optimizer", optimizer=type(opt).__name__,
                           foreach=opt.defaults.get("foreach"), fused=opt.defaults.get("fused"),
                           params=len(params), scalars=sum(1 for p in params if p.numel() == 1))
            except Exception:
                pass

        self._patch(torch.optim.Optimizer, "__init__", optimizer_init)
        for cls in (anomaly_mode.set_detect_anomaly, anomaly_mode.detect_anomaly):
            self._wrap_init(cls, "anomaly_detection")
        set_threads = torch.set_num_threads

        def set_num_threads(n):
            sites._add("set_num_threads", threads=int(n))
            return set_threads(n)

        self._patch(torch, "set_num_threads", set_num_threads)
        compile_, compiled_at = torch.compile, set()

        def compile(*args, **kwargs):  # noqa: A001  (torch's own name)
            where = _user_frame(2)  # each line once: a compile per step would fill the records
            if where is not None and (where["file"], where["line"]) not in compiled_at:
                compiled_at.add((where["file"], where["line"]))
                backend = kwargs.get("backend", "inductor")
                sites._add("compile", mode=kwargs.get("mode"),
                           backend=backend if isinstance(backend, str) else getattr(backend, "__name__", "custom"))
            return compile_(*args, **kwargs)

        compile.__doc__ = compile_.__doc__
        compile.__wrapped__ = compile_  # type: ignore[attr-defined]
        self._patch(torch, "compile", compile)
        self._float64_sources(torch)
        self._dataloaders(torch)

    def _dataloaders(self, torch) -> None:
        """The lines that build a DataLoader, each once (one built every epoch would fill the
        records), with how it fetches: whether it indexes its dataset one sample at a time and
        collates the samples (automatic batching on a dataset without `__getitems__`)."""
        from torch.utils.data import DataLoader

        sites, seen, original = self, set(), DataLoader.__init__

        def dataloader_init(loader, *args, **kwargs):
            original(loader, *args, **kwargs)
            try:
                where = _user_frame(2)
                if where is None or (where["file"], where["line"]) in seen or len(sites.records) >= MAX_RECORDS:
                    return
                seen.add((where["file"], where["line"]))
                dataset = loader.dataset
                sites.records.append({
                    "what": "dataloader", **where, "dataset": type(dataset).__name__,
                    "batch_size": loader.batch_size, "num_workers": loader.num_workers,
                    "per_sample": loader._auto_collation and not hasattr(dataset, "__getitems__"),
                    "sample_elements": _sample_elements(dataset)})
            except Exception:
                pass

        self._patch(DataLoader, "__init__", dataloader_init)

    def _float64_sources(self, torch) -> None:
        """Where float64 data enters torch: the default dtype set to float64, a float64 NumPy
        array converted (NumPy's default). The line to change, not the ops' lines; each line
        once (a conversion per step would fill the records)."""
        sites, seen = self, set()
        set_default, from_numpy = torch.set_default_dtype, torch.from_numpy

        def note(how: str) -> None:
            where = _user_frame(3)
            if where is not None and (where["file"], where["line"]) not in seen:
                seen.add((where["file"], where["line"]))
                if len(sites.records) < MAX_RECORDS:
                    sites.records.append({"what": "float64_source", "how": how, **where})

        def set_default_dtype(d):
            if d is torch.float64:
                note("set_default_dtype")
            return set_default(d)

        def from_numpy_(array):
            t = from_numpy(array)
            if t.dtype is torch.float64:
                note("from_numpy")
            return t

        self._patch(torch, "set_default_dtype", set_default_dtype)
        self._patch(torch, "from_numpy", from_numpy_)

    def _wrap_init(self, cls, what: str) -> None:
        """Record each construction of `cls` that turns its mode on, unless torch's own code makes
        it (AOT autograd traces a compiled model's backward under `detect_anomaly`: not the user's
        setting)."""
        original = cls.__init__
        sites = self
        torch_dir = os.path.dirname(os.path.abspath(sys.modules["torch"].__file__ or "")) + os.sep

        def __init__(obj, *args, **kwargs):
            original(obj, *args, **kwargs)
            mode = args[0] if args else kwargs.get("mode", True)
            if mode and not os.path.abspath(sys._getframe(1).f_code.co_filename).startswith(torch_dir):
                sites._add(what)

        self._patch(cls, "__init__", __init__)

    def _patch(self, owner, name: str, value) -> None:
        self._restore.append((owner, name, owner.__dict__.get(name) if isinstance(owner, type)
                              else getattr(owner, name)))
        setattr(owner, name, value)

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._restore = []


def _sample_elements(dataset: Any) -> int | None:
    """Elements of one sample's first tensor, where the dataset holds its tensors (a
    TensorDataset: read from the shape, no torch op, no user code run); None otherwise."""
    import math

    import torch
    from torch.utils.data import TensorDataset

    if not isinstance(dataset, TensorDataset):  # a user's property or __getattr__ is not run
        return None
    tensors = dataset.tensors
    try:
        with torch._C.DisableTorchFunction():  # the line marker's mode must not see torchneck's reads
            return math.prod(tuple(tensors[0].shape)[1:]) if isinstance(tensors, tuple) and tensors else None
    except Exception:
        return None

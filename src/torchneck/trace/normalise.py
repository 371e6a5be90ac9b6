"""Normalisation: the values of decoded events made into checked, typed columns.

Whatever a trace writes (ids as strings, an absent field, a category of any era or vendor, a
GPU event without its device or stream in args), the columns hold one type and one meaning:
categories coded (`table.Cat`), ids as integers (-1 when absent), GPU events placed on a device
and a stream. After loading, spans that PyTorch records as ops but are annotations (compile
stages, the profiler's steps in 1.8) are filed as annotations.
"""

from __future__ import annotations

import numpy as np

from ..sites import LINE_PREFIX
from .table import Cat, EventTable, in_categories


def _num(value, default: int = -1) -> int:
    """Lenient integer: ids written as strings ("stream 7") keep their digits."""
    if value is None:
        return default
    if isinstance(value, (bool, int)):
        return int(value)
    if isinstance(value, float):
        return int(value) if value == value else default
    if isinstance(value, str):
        digits = "".join(ch for ch in value if ch.isdigit())
        return int(digits) if digits else default
    return default


def _int_column(values: list, default: int, dtype) -> np.ndarray:
    """Integers from a list that may hold None (absent) or strings, fast path in numpy."""
    try:
        arr = np.array(values, dtype=np.float64)  # None -> nan
    except (TypeError, ValueError):
        return np.array([_num(v, default) for v in values], dtype=np.int64).astype(dtype)
    arr[~(np.abs(arr) < 2.0**63)] = default  # absent (nan), or beyond int64
    return arr.astype(np.int64).astype(dtype, copy=False)


def _float_column(values: list, default: float) -> np.ndarray:
    try:
        arr = np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        arr = np.array([v if isinstance(v, (int, float)) else _to_float(v) for v in values], dtype=np.float64)
    if default == default:
        arr[np.isnan(arr)] = default
    return arr


def _to_float(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


_INT32_MAX = np.iinfo(np.int32).max


def _rows_with_args(cats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(GPU events, host ops): the rows whose device/stream/bytes args, and whose shapes, are
    kept; runtime and driver calls carry neither."""
    gpu = in_categories(cats, (Cat.KERNEL, Cat.GPU_MEMCPY, Cat.GPU_MEMSET, Cat.GPU_USER_ANNOTATION))
    return gpu, ~gpu & (cats != Cat.RUNTIME) & (cats != Cat.DRIVER)


def _gpu_placement(gpu, device, stream, pid_arr, tid_arr, strings) -> tuple[np.ndarray, np.ndarray]:
    """GPU events (`gpu`, a row mask): kineto puts the device in pid and the stream in tid when
    args lack them. Host events get -1 in both."""
    if gpu.any():
        table = strings.strings

        def digits_of(ids: np.ndarray) -> np.ndarray:  # parse each distinct pid/tid string once
            uniq, inverse = np.unique(ids, return_inverse=True)
            return np.array([_num(table[i], 0) for i in uniq.tolist()], dtype=np.int64)[inverse]

        fallback_dev = digits_of(pid_arr[gpu])
        fallback_stream = digits_of(tid_arr[gpu])
        dev_g = device[gpu]
        device[gpu] = np.where(dev_g >= 0, dev_g, fallback_dev)
        st_g = stream[gpu]
        stream[gpu] = np.where(st_g >= 0, st_g, fallback_stream)
    device[~gpu] = -1
    stream[~gpu] = -1
    return device, stream


def _x_dict(ts, dur, cats, name, pid_arr, tid_arr, corr, device, stream, shapes, types, nbytes, stack) -> dict:
    return {
        "ts": ts,
        "dur": dur.astype(np.float32),
        "cat": cats,
        "name": name,
        "pid": pid_arr,
        "tid": tid_arr,
        "correlation": corr,
        "device": np.clip(device, -1, 32767).astype(np.int16),
        "stream": np.clip(stream, -1, _INT32_MAX).astype(np.int32),
        "shapes": shapes,
        "types": types,
        "nbytes": nbytes,
        "stack": stack,
    }


_PROFILER_SPANS = ("ProfilerStep#", "Optimizer.step#", "Optimizer.zero_grad#", "enumerate(DataLoader)#")
"""Spans `torch.profiler` and `torch.optim`/`DataLoader` record around the user's code: kineto
files them as `user_annotation` since PyTorch 1.9, PyTorch 1.8 as `Operator` like any op."""


def _is_framework_span(name: str) -> bool:
    return (name.endswith(" (dynamo_timed)")
            or name.startswith(("Torch-Compiled Region:", "## Call CompiledFxGraph", LINE_PREFIX, *_PROFILER_SPANS))
            or name in ("CompiledFunction", "CompiledFunctionBackward"))


def _spans_not_ops(events: EventTable) -> None:
    """Spans that torch.compile records as `cpu_op` (compile stages `... (dynamo_timed)`,
    `Torch-Compiled Region`, compiled-graph calls), torchneck's own line spans (C++
    `RecordFunctionFast`, also `cpu_op`) and, in PyTorch 1.8 traces, the profiler's step and the
    optimizer's spans (`_PROFILER_SPANS`) are annotations, not operators: as ops they would top
    the op table and swallow their children's self time."""
    if not len(events):
        return
    ids = events.names_matching(_is_framework_span)
    if not ids.any():
        return
    rows = (events.cat == Cat.CPU_OP) & ids[events.name]
    events.cat[rows] = Cat.USER_ANNOTATION

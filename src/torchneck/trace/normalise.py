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

TS_LIMIT_US = 2.0**53
"""Starts beyond +-2**53 µs (285 years) are not times: a trace's clock is µs since the epoch (1.7e15
in 2024) or since the process started, and float64 holds whole µs exactly only below this."""
DUR_LIMIT_US = 1e12
"""Durations of 1e12 µs (11.6 days) or more are not a profiled span (a training job's trace covers
seconds to hours); kept, one such event would cover every step and its end every sum."""
_INT64 = 1 << 63

MAX_NAME_CHARS = 16 << 10
"""Names (and pids, tids) longer than this are shortened at load (`shortened`). Real ones stay
far below: the longest kernel name in the bundled traces is 5,141 characters (a C++ template).
A name of 16 MB took the terminal report minutes to lay out, and each copy of it memory."""
MAX_TEXT_CHARS = 1 << 20
"""Shapes, dtypes and call stacks (texts the analyses parse) longer than this are shortened."""


def shortened(text: str, limit: int) -> str:
    """`text` cut to `limit` characters: its start, "…" and a hash of the whole, so that distinct
    long names stay distinct (and the same name is shortened alike in every slice)."""
    import hashlib  # here: its OpenSSL costs 4 MB of memory, and a long name is rare

    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()
    return text[:limit - len(digest) - 1] + "…" + digest


def out_of_range(ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(`ts` with the start of each event whose start or duration is out of range (`TS_LIMIT_US`,
    `DUR_LIMIT_US`, infinite or not a number) set to NaN, so that it is dropped like an event
    without a start; `dur` with theirs set to 0; how many). No infinity or NaN reaches an
    analysis."""
    bad = ~(np.abs(ts) < TS_LIMIT_US) & ~np.isnan(ts) | ~(dur < DUR_LIMIT_US)
    n = int(np.count_nonzero(bad))
    if len(dur) and dur.min() < -DUR_LIMIT_US:  # negative: counted and made 0 later, but cast first
        dur = np.maximum(dur, -DUR_LIMIT_US)
    if not n:
        return ts, dur, 0
    return np.where(bad, np.nan, ts), np.where(bad, 0.0, dur), n


def _num(value, default: int = -1) -> int:
    """Lenient integer: ids written as strings ("stream 7") keep their digits; anything beyond
    64 bits (or not a number) is `default`."""
    if value is None:
        return default
    if isinstance(value, (bool, int)):
        found = int(value)
    elif isinstance(value, float):
        found = int(value) if abs(value) < _INT64 else default
    elif isinstance(value, str):
        digits = "".join(ch for ch in value if ch.isdigit())
        found = int(digits) if 0 < len(digits) <= 19 else default
    else:
        return default
    return found if -_INT64 <= found < _INT64 else default


def _int_column(values: list, default: int, dtype) -> np.ndarray:
    """Integers from a list that may hold None (absent) or strings, fast path in numpy."""
    try:
        arr = np.array(values, dtype=np.float64)  # None -> nan
    except (TypeError, ValueError, OverflowError):
        return np.array([_num(v, default) for v in values], dtype=np.int64).astype(dtype)
    arr[~(np.abs(arr) < 2.0**63)] = default  # absent (nan), or beyond int64
    return arr.astype(np.int64).astype(dtype, copy=False)


def _float_column(values: list, default: float) -> np.ndarray:
    try:
        arr = np.array(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        arr = np.array([_to_float(v) for v in values], dtype=np.float64)
    if default == default:
        arr[np.isnan(arr)] = default
    return arr


def _to_float(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
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


COMPILE_STAGE_SUFFIX = " (dynamo_timed)"
"""How torch.compile names the spans of its own stages (`aot_trace_joint_graph (dynamo_timed)`)."""


def _is_framework_span(name: str) -> bool:
    return (name.endswith(COMPILE_STAGE_SUFFIX)
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

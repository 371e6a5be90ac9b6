"""What the capture's module hooks note of each top-level model call's input, per line of the
user's code that made it: enough to tell a model called once per sample (a batch of one), a
generation loop feeding the whole prefix again (an input one position longer than the last
call's), a constant input encoded again and again (the same unchanged tensor) and batches padded
past their longest sequence (token ids or a padding mask whose every row ends in a run of one
value), and targets the loss mostly skips (a masked language model's labels, -100 but at the
masked positions) from the way most programs call their model (diagnose/rules/calls.py,
padding.py and rules/ignored.py read the tallies)."""

from __future__ import annotations

import ctypes
import math
import sys
import types
import weakref
from typing import Any

from ..sites import is_user_file

INPUTS_LOOKED_AT = 4
"""The first positional and keyword arguments looked at for the call's tensor input."""
RECENT_KEPT = 32
"""Inputs remembered per line to tell one passed again (a corpus encoded at every request)."""
CONTENT_KEPT = 1024
"""Large inputs' fingerprints remembered per line (~0.6 KB each): a feed's 200 images asked again
after 150 others (a cache too small evicts them first) come back far beyond `RECENT_KEPT`."""
CALLERS_KEPT = 8
"""Lines kept that passed an input again (the call's caller: where the input comes from)."""
CONTENT_MIN_ELEMENTS = 4096
"""Inputs at least this large are also told apart by content (an input rebuilt from the same
constant every call: a catalog's features concatenated with its ids); a smaller one costs little
to recompute."""
CONTENT_SAMPLES = 64
"""Elements read (evenly spaced, the first and last among them) for an input's fingerprint."""
CONTENT_MIN_DISTINCT = 8
"""A fingerprint of fewer distinct values (zeros, padding, one-hot rows) tells too little: batches
that differ would look the same."""
PADDING_LOOKED_FIRST = 64
"""Calls of a line whose inputs are all looked at for padding; after them, one in
`PADDING_LOOK_EVERY` (~2-10 us a look: a server's 100,000 per-request calls would pay ~1 s)."""
PADDING_LOOK_EVERY = 16
PADDING_MIN_LENGTH = 8
"""Shorter sequences are not worth trimming."""
PADDING_MAX_ELEMENTS = 1 << 20
"""Larger inputs are not read (a look stays a few microseconds)."""
ZEROS_MIN_SIDE = 256
"""A 2-D floating input with both sides this long is looked at for zeros (a graph's adjacency, an
interaction matrix): a product with a smaller one costs little either way."""
ZEROS_ROWS_READ = 64
"""Rows read (evenly spaced, whole rows) to estimate a matrix's share of non-zeros: a graph's or
a banded matrix's rows are alike, and a look stays well under a millisecond."""
ZEROS_LOOKS_KEPT = 16
"""Distinct matrices looked at per line (the same adjacency passed every call is looked at once)."""
MOSTLY_ZERO = 0.03
"""At most this share of non-zeros is worth a sparse layout: a sparse product, its backward
included, costs ~20-30x a dense one per stored value (`OpHotspot.SPARSE_COST`), so it breaks even
near 4 % and saves at least two fifths below 3 %."""
ZEROS_COLUMNS_READ = 4096
"""Columns read (evenly spaced) of each row read: a look stays under a millisecond however wide."""
ROWS_MIN = 256
"""A 2-D input of at least this many rows is looked at for rows repeated (a request's features
copied to each of its candidates): on fewer, recomputing a few rows costs little."""
ROWS_READ = 65_536
"""Rows read (the first ones) to count the distinct ones: a look stays a few ms (a hash per row,
then a sort of the hashes). Repeats made by `repeat_interleave` or an index are near each other."""
ROWS_BYTES = 8 << 20
"""At most this much of the input is read (its first rows, `ROWS_MIN` at least): a look at a
[65536, 4096] float input stays a few ms, not a third of a second."""
ROWS_LOOKS_KEPT = 8
"""Calls looked at per line for repeated rows: a server's thousands of calls are alike."""


class SiteInputs:
    """The first tensor inputs of the top-level module calls made at one line of the user's code:
    calls with a batch of one (2+ dimensions, the first of size 1: `model(x[None])` per sample; or
    a flat input beside the offsets of one bag: `model(ids, offsets)` per request) and their mean
    size;
    calls whose input is the previous call's grown by one along one dimension (a prefix fed again
    with one more token: generation without a cache) and that dimension's sizes summed; calls
    given again the very tensor of a recent call, unchanged since (same object, same version
    counter), or a large input of a recent call's content (`content_fingerprint`: rebuilt from
    the same constant), whose output could have been kept, and the lines that called from there."""

    __slots__ = ("batch_of_one", "single_elements", "grew_by_one", "grown_len", "last_shape", "repeated",
                 "repeated_from", "recent",
                 "recent_content", "repeated_inputs", "calls", "padding_looked", "padded", "padded_len", "needed_len",
                 "zeros_looked", "mostly_zero", "modules_looked", "module", "ignored_looked", "ignored_share",
                 "rows_looked", "rows_seen", "distinct_share", "repeated_argument")

    def __init__(self) -> None:
        self.batch_of_one = self.single_elements = self.grew_by_one = self.grown_len = self.repeated = 0
        self.calls = self.padding_looked = self.padded = self.padded_len = self.needed_len = 0
        self.ignored_looked = 0  # calls given targets mostly set to the loss's ignore index...
        self.ignored_share = 0.0  # ... and the share of their positions so set, summed
        self.rows_looked = self.rows_seen = 0  # calls whose 2-D inputs were looked at for repeated rows, their rows
        self.distinct_share = 0.0  # ... the smallest share of distinct rows among each call's inputs, summed
        self.repeated_argument: Any = None  # the argument holding the most repeated rows (its position or keyword)
        self.last_shape: tuple | None = None
        self.repeated_from: dict[tuple, int] = {}
        self.recent: dict[int, tuple] = {}  # id(tensor) -> (weak reference, version, [repeated yet])
        self.recent_content: dict[tuple, list] = {}  # fingerprints of recent large inputs -> [repeated yet]
        self.repeated_inputs = 0  # distinct inputs given again (their first computation was needed)
        self.zeros_looked: dict[int, tuple] = {}  # id(tensor) -> (weak reference, version, key, [calls])
        self.mostly_zero: dict[tuple, dict[str, Any]] = {}  # (rows, cols, argument) -> what was seen
        self.module: str | None = None  # the class of the module called there (its first call's)
        self.modules_looked: dict[int, list] = {}  # called modules looked at -> their mostly-zero tensors' keys

    def note(self, tensor: Any, caller: types.FrameType | None, others: list | None = None) -> None:
        shape = tuple(tensor.shape)
        # one sample: a batch dimension of 1, or a flat input with the offsets (or lengths) of
        # one bag beside it (`EmbeddingBag(ids, offsets)`, packed sequences)
        if len(shape) >= 2 and shape[0] == 1 or len(shape) == 1 and any(tuple(t.shape) == (1,) for t in others or ()):
            self.batch_of_one += 1
            self.single_elements += math.prod(shape)  # the shape, not numel(): no torch call
        last = self.last_shape
        if last is not None and len(last) == len(shape):
            grown = [(n, n - m) for n, m in zip(shape, last) if n != m]
            if len(grown) == 1 and grown[0][1] == 1:
                self.grew_by_one += 1
                self.grown_len += grown[0][0]
        self.last_shape = shape
        try:
            version = tensor._version  # inference tensors have none: only their content can tell
        except Exception:
            version = None
        seen = self.recent.get(id(tensor)) if version is not None else None
        if seen is not None and seen[0]() is tensor and seen[1] == version:
            self._repeated(caller, seen[2])
            return
        if version is not None:
            if len(self.recent) >= RECENT_KEPT:
                self.recent.clear()
            self.recent[id(tensor)] = (weakref.ref(tensor), version, [False])
        fingerprint = content_fingerprint(tensor)
        if fingerprint is None:
            return
        known = self.recent_content.get(fingerprint)
        if known is not None:
            self._repeated(caller, known)
            return
        if len(self.recent_content) >= CONTENT_KEPT:
            self.recent_content.clear()
        self.recent_content[fingerprint] = [False]

    def _repeated(self, caller: types.FrameType | None, flag: list) -> None:
        if not flag[0]:
            flag[0] = True
            self.repeated_inputs += 1
        self.repeated += 1
        where = user_frame(caller)
        if where is not None and (where in self.repeated_from or len(self.repeated_from) < CALLERS_KEPT):
            self.repeated_from[where] = self.repeated_from.get(where, 0) + 1

    def note_padding(self, tensors: list[Any]) -> None:
        """Of the call's 2-D integer or boolean host tensors (token ids, attention or padding
        masks), the one padded furthest past its batch's longest row (`padded_past_longest`), and
        the largest share of targets set to the loss's ignore index (`ignored_share`): sampled
        after the first `PADDING_LOOKED_FIRST` calls."""
        self.calls += 1
        if self.calls > PADDING_LOOKED_FIRST and self.calls % PADDING_LOOK_EVERY:
            return
        best: tuple[int, int] | None = None
        ignored = max((ignored_share(tensor) for tensor in tensors), default=0.0)
        if ignored > 0:
            self.ignored_looked += 1
            self.ignored_share += ignored
        for tensor in tensors:
            found = padded_past_longest(tensor)
            if found is not None and (best is None or found[0] - found[1] > best[0] - best[1]):
                best = found
        if best is None:
            return
        self.padding_looked += 1
        length, needed = best
        if needed < length:
            self.padded += 1
            self.padded_len += length
            self.needed_len += needed

    def note_rows(self, tensors: list[tuple[Any, Any]]) -> None:
        """Of the call's 2-D host tensors of `ROWS_MIN` rows or more, the one with the smallest
        share of distinct rows (`distinct_row_share`): sampled as `note_padding` is (after it)."""
        if self.rows_looked >= ROWS_LOOKS_KEPT or self.calls > PADDING_LOOKED_FIRST and self.calls % PADDING_LOOK_EVERY:
            return
        best: tuple[int, float, Any] | None = None
        for at, tensor in tensors:
            found = distinct_row_share(tensor)
            if found is not None and (best is None or found[1] < best[1]):
                best = (*found, at)
        if best is None:
            return
        self.rows_looked += 1
        self.rows_seen += best[0]
        self.distinct_share += best[1]
        if best[1] < 0.5 and self.repeated_argument is None:
            self.repeated_argument = best[2]

    def note_zeros(self, tensor: Any, argument: int | str) -> None:
        """Note a large 2-D floating input that is mostly zeros (`nonzero_share`), once per
        distinct tensor: a dense matrix the model multiplies every zero of."""
        import torch

        with torch._C.DisableTorchFunction():  # the line marker's mode must not see torchneck's calls
            if tensor.dim() != 2 or tensor.dtype not in (torch.float32, torch.float64) \
                    or tensor.device.type != "cpu" or min(tensor.shape) < ZEROS_MIN_SIDE:
                return
        try:
            version = tensor._version
        except Exception:
            version = None
        seen = self.zeros_looked.get(id(tensor))
        if seen is not None and seen[0]() is tensor and seen[1] == version:
            seen[3][0] += 1  # the same matrix again: built once, multiplied at every call
            entry = self.mostly_zero.get(seen[2])
            if entry is not None:
                entry["calls"] = max(entry["calls"], seen[3][0])
            return
        if len(self.zeros_looked) >= ZEROS_LOOKS_KEPT:
            return
        share = nonzero_share(tensor)
        key = (*tuple(tensor.shape), argument)
        self.zeros_looked[id(tensor)] = (weakref.ref(tensor), version, key, [1])  # a look that found nothing too
        if share is not None and 0 < share <= MOSTLY_ZERO:  # all zeros: a tensor to drop, not to store sparse
            entry = self.mostly_zero.setdefault(key, {"shape": list(key[:2]), "argument": argument,
                                                      "nonzero_share": share, "calls": 1})
            entry["nonzero_share"] = max(entry["nonzero_share"], share)

    def note_module_tensors(self, module: Any) -> None:
        """Look once per called module at the tensors it holds besides its parameters (buffers,
        plain tensor attributes, its submodules' too): a graph's adjacency kept as a dense buffer
        is multiplied at every call without ever being an input. Each is noted as "buffer:<its
        name>" with `note_zeros`; a mostly-zero one counts every later call of the module."""
        import torch

        found = self.modules_looked.get(id(module))
        if found is not None:
            for key in found:
                self.mostly_zero[key]["calls"] += 1
            return
        if len(self.modules_looked) >= ZEROS_LOOKS_KEPT:
            return
        before = set(self.mostly_zero)
        for prefix, sub in module.named_modules():
            held = {**{k: v for k, v in vars(sub).items() if isinstance(v, torch.Tensor)
                       and not isinstance(v, torch.nn.Parameter)}, **sub._buffers}
            for name, tensor in held.items():
                if isinstance(tensor, torch.Tensor):
                    self.note_zeros(tensor, f"buffer:{prefix + '.' if prefix else ''}{name}")
        self.modules_looked[id(module)] = [k for k in self.mostly_zero if k not in before]

    def to_json(self) -> dict[str, Any]:
        return {"batch_of_one": self.batch_of_one,
                "single_mean_elements": round(self.single_elements / self.batch_of_one) if self.batch_of_one else None,
                "grew_by_one": self.grew_by_one,
                "grown_mean_len": round(self.grown_len / self.grew_by_one, 1) if self.grew_by_one else None,
                "repeated": self.repeated, "repeated_inputs": self.repeated_inputs,
                "padding_looked": self.padding_looked, "padded": self.padded,
                "padded_mean_len": round(self.padded_len / self.padded, 1) if self.padded else None,
                "needed_mean_len": round(self.needed_len / self.padded, 1) if self.padded else None,
                "ignored_looked": self.ignored_looked,
                "ignored_mean_share": (round(self.ignored_share / self.ignored_looked, 3)
                                       if self.ignored_looked else None),
                "mostly_zero": list(self.mostly_zero.values()), "module": self.module,
                "rows_looked": self.rows_looked,
                "rows_mean": round(self.rows_seen / self.rows_looked) if self.rows_looked else None,
                "distinct_rows_share": round(self.distinct_share / self.rows_looked, 4) if self.rows_looked else None,
                "repeated_rows_argument": self.repeated_argument,
                "repeated_from": [{"file": f, "line": ln, "function": fn, "calls": n}
                                  for (f, ln, fn), n in sorted(self.repeated_from.items(), key=lambda kv: -kv[1])]}


def nonzero_share(tensor: Any) -> float | None:
    """The share of non-zeros in `ZEROS_ROWS_READ` evenly spaced rows (at most
    `ZEROS_COLUMNS_READ` evenly spaced columns of each) of a 2-D floating host tensor whose sides
    are both at least `ZEROS_MIN_SIDE` (read through its data pointer: no torch op); None for
    other tensors."""
    import numpy as np

    try:
        array = _host_array(tensor, floating=True)
    except Exception:
        return None
    if array is None or min(array.shape) < ZEROS_MIN_SIDE:
        return None
    n, m = array.shape
    rows = array[::max(1, n // ZEROS_ROWS_READ)][:ZEROS_ROWS_READ, ::max(1, m // ZEROS_COLUMNS_READ)]  # strided views
    return float(np.count_nonzero(rows)) / rows.size


def distinct_row_share(tensor: Any) -> tuple[int, float] | None:
    """(rows, share of distinct rows among the first `ROWS_READ` rows and `ROWS_BYTES`) of a 2-D
    host tensor (integer, boolean or floating) of at least `ROWS_MIN` rows and two columns, read
    through its data pointer (no torch op); None for other tensors. Identical rows give identical outputs through
    a row-wise model (an MLP tower, an embedding lookup): computed once each, gathered after.
    Each row's bytes are hashed by a product with fixed random odd multipliers (a collision is
    ~1 in 2^64), then the hashes sorted."""
    import numpy as np

    try:
        array = _host_array(tensor, floating=tensor.is_floating_point())
    except Exception:
        return None
    if array is None or array.shape[0] < ROWS_MIN or array.shape[1] < 2:
        return None
    n = array.shape[0]
    width = array.dtype.itemsize * array.shape[1]
    rows = np.ascontiguousarray(array[:min(ROWS_READ, max(ROWS_MIN, ROWS_BYTES // width))])
    word = next(w for w in (8, 4, 2, 1) if width % w == 0)
    words = rows.view(f"u{word}").reshape(len(rows), width // word)
    multipliers = np.random.default_rng(width).integers(1, 2 ** 63, width // word, dtype=np.uint64) | np.uint64(1)
    keys = words @ multipliers  # uint64 arithmetic wraps: a hash of the row
    return n, len(np.unique(keys)) / len(keys)


def _host_array(tensor: Any, floating: bool = False):
    """A read-only NumPy view of a 2-D integer or boolean host tensor (`floating`: a float32 or
    float64 one, of any size), read through its data pointer and strides: no torch op runs
    (`Tensor.numpy()` records aten::detach and aten::to in the program's trace, and the line
    marker's torch function mode would see it); None for other tensors."""
    import numpy as np
    import torch

    kinds = {torch.float32: np.float32, torch.float64: np.float64} if floating else \
        {torch.int64: np.int64, torch.int32: np.int32, torch.bool: np.bool_, torch.uint8: np.uint8}
    with torch._C.DisableTorchFunction():
        if (tensor.dim() != 2 or tensor.dtype not in kinds or tensor.device.type != "cpu"
                or (not floating and (tensor.numel() > PADDING_MAX_ELEMENTS or tensor.shape[1] < PADDING_MIN_LENGTH))
                or tensor.numel() == 0 or tensor.is_sparse or type(tensor) is not torch.Tensor):
            return None
        pointer, shape, strides = tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride())
        offset, stored = int(tensor.storage_offset()), tensor.untyped_storage().nbytes()
    if min(strides) < 0:
        return None
    kind = np.dtype(kinds[tensor.dtype])
    span = (shape[0] - 1) * strides[0] + (shape[1] - 1) * strides[1] + 1  # elements from the first to the last
    if not _inside_storage(pointer, offset, span, kind.itemsize, stored):
        return None
    memory = np.frombuffer(memoryview((ctypes.c_char * (span * kind.itemsize)).from_address(pointer)), dtype=kind)
    return np.lib.stride_tricks.as_strided(memory, shape, tuple(n * kind.itemsize for n in strides), writeable=False)


def _inside_storage(pointer: int, offset: int, span: int, itemsize: int, stored: int) -> bool:
    """The elements a read covers lie inside the tensor's storage: a storage resized under a view
    (`untyped_storage().resize_(0)`) leaves a view whose pointer reads freed memory (a segfault)."""
    return pointer != 0 and span > 0 and (offset + span) * itemsize <= stored


def content_fingerprint(tensor: Any) -> tuple | None:
    """(shape, dtype, `CONTENT_SAMPLES` evenly spaced elements' bytes) of a contiguous host tensor
    of at least `CONTENT_MIN_ELEMENTS` elements, read through its data pointer (no torch op);
    None for other tensors or when the elements read hold too few distinct values."""
    import numpy as np
    import torch

    with torch._C.DisableTorchFunction():
        if (tensor.device.type != "cpu" or tensor.is_sparse or tensor.numel() < CONTENT_MIN_ELEMENTS
                or not tensor.is_contiguous() or tensor.is_complex()):
            return None
        pointer, count, size, shape = tensor.data_ptr(), tensor.numel(), tensor.element_size(), tuple(tensor.shape)
        dtype, offset, stored = str(tensor.dtype), int(tensor.storage_offset()), tensor.untyped_storage().nbytes()
    if size not in (1, 2, 4, 8) or not _inside_storage(pointer, offset, count, size, stored):
        return None
    memory = np.frombuffer(memoryview((ctypes.c_char * (count * size)).from_address(pointer)), dtype=f"u{size}")
    sample = memory[np.linspace(0, count - 1, CONTENT_SAMPLES).astype(np.int64)]
    if len(np.unique(sample)) < CONTENT_MIN_DISTINCT:
        return None
    return shape, dtype, sample.tobytes()


def padded_past_longest(tensor: Any) -> tuple[int, int] | None:
    """(length, longest row's length) when every row of a 2-D integer or boolean host tensor ends
    (right padding) or begins (left padding) with a run of one value, the same in every row, and
    some row holds more than that value: the padding and what the longest row needs. A tensor of
    one value throughout (a mask with no padding) or rows ending differently give None."""
    import numpy as np

    try:
        array = _host_array(tensor)
    except Exception:
        return None
    if array is None:
        return None
    length = array.shape[1]
    best = None
    for rows in (array, array[:, ::-1]):  # right padding, then left padding
        last = rows[:, -1]
        if not (last == last[0]).all():
            continue
        same = (rows == last[0])[:, ::-1]
        run = np.where(same.all(axis=1), length, same.argmin(axis=1))  # each row's closing run
        needed = int(length - run.min())
        if 0 < needed and (best is None or needed < best[1]):
            best = (length, needed)
    return best


IGNORE_INDEX = -100
"""The target value torch's losses skip by default (`cross_entropy(..., ignore_index=-100)`): a
masked language model's labels hold it at every position but the masked ones."""


def ignored_share(tensor: Any) -> float:
    """The share of a 2-D integer host tensor's elements equal to `IGNORE_INDEX` (targets the loss
    skips), read without a torch op; 0 for other tensors."""
    try:
        array = _host_array(tensor)
    except Exception:
        return 0.0
    if array is None or array.dtype.kind != "i":
        return 0.0
    return float((array == IGNORE_INDEX).mean())


def user_frame(frame: types.FrameType | None) -> tuple[str, int, str] | None:
    """(file, line, function) of the first frame of the user's code from `frame` outwards."""
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return None
    code = frame.f_code
    return code.co_filename, frame.f_lineno, getattr(code, "co_qualname", code.co_name)


def note_site_input(site_inputs: dict, key: tuple, args: tuple, kwargs: dict | None,
                    caller: types.FrameType | None = None, module: Any = None) -> None:
    """Note the first tensor input of a top-level module call made at `key` (`SiteInputs`), and
    the tensors the called `module` holds; `caller` is the frame that called the function holding
    the line. Never raises."""
    import torch

    try:
        named = [*enumerate(args[:INPUTS_LOOKED_AT]), *list((kwargs or {}).items())[:INPUTS_LOOKED_AT]]
        tensors = [(at, value) for at, value in named if isinstance(value, torch.Tensor)]
        if module is None and not tensors:
            return
        tally = site_inputs.get(key)
        if tally is None:
            tally = site_inputs[key] = SiteInputs()
        if module is not None:
            if tally.module is None:
                tally.module = type(module).__name__
            tally.note_module_tensors(module)
        if not tensors:
            return
        tally.note_padding([value for _, value in tensors])
        tally.note_rows(tensors)
        for at, value in tensors:
            tally.note_zeros(value, at)
        tally.note(tensors[0][1], caller, [value for _, value in tensors[1:]])
    except Exception:
        pass


def note_module_site(log: Any, sites: dict, args: tuple = (), kwargs: dict | None = None,
                     kept: int = 20, module: Any = None) -> None:
    """Count the user's line that called a top-level module (a few µs a call; called from the
    module hook, whose caller is two frames up): the line an inference fix
    (`torch.inference_mode()`) goes around, or a batching fix changes, which the trace cannot
    name; and the shape of the call's first tensor input (`log.site_inputs`). At most `kept`
    lines are counted."""
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return
    code = frame.f_code
    key = (code.co_filename, frame.f_lineno, getattr(code, "co_qualname", code.co_name))
    if key in sites or len(sites) < kept:
        sites[key] = sites.get(key, 0) + 1
        note_site_input(log.site_inputs, key, args, kwargs, frame.f_back, module)

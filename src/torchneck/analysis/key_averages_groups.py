"""The groups of `key_averages.py`'s table: each row's key as one int64 of (name, kind[, input
shapes][, stack]), as torch keys its `FunctionEventAvg`s for `group_by_input_shape` and
`group_by_stack_n`.
"""

from __future__ import annotations

import json

import numpy as np

from ..errors import TorchneckError
from ..trace.table import EventTable, Trace
from .groups import positions_in
from .key_averages_forest import KIND_NAMES, ROW_BLOCK, Forest
from .key_averages_totals import DenseTotals, Totals

DENSE_KEYS = 1 << 17
"""Up to this many possible groups, totals go straight into arrays indexed by the group (one
`np.bincount` a column and a block); beyond, a block's keys are sorted and merged (`Totals`)."""

STACK_DROPPED = (
    ("autograd/__init__", "_make_grads"), ("autograd/__init__", "backward"), ("torch/tensor", "backward"),
    ("_internal/common_utils", "prof_callable"), ("_internal/common_utils", "prof_func_call"),
    ("_internal/common_utils", "prof_meth_call"),
)
"""Stack frames torch leaves out of an event's stack (`_filter_stack_entry`): a frame whose
text holds both parts of a pair."""


class Keys:
    """Each row's group as one int64: (name, kind[, input shapes][, stack]), the name as its rank
    among the names present, so that the usual groupings index small dense arrays."""

    def __init__(self, forest: Forest, trace: Trace, by_shape: bool, stack_n: int, canon_name: np.ndarray,
                 present: np.ndarray):
        """`by_shape`, `stack_n`: `TableOptions.group_by_input_shape` and `.group_by_stack_n`."""
        t = forest.table
        self.forest, self.canon_name = forest, canon_name
        self.names = np.flatnonzero(present)  # canonical name ids present, ascending
        rank = np.full(len(present), -1, dtype=np.int64)
        rank[self.names] = np.arange(len(self.names))
        self.name_key = rank[canon_name] * len(KIND_NAMES)  # per string id
        self.shapes_text: list[str] = ["[]"]
        self.shape_of_args = np.zeros(len(t.arg_pairs), dtype=np.int64)
        if by_shape:
            self.shape_of_args, self.shapes_text = _canonical_shapes(t)
        self.stacks = _StackKeys(forest, trace, stack_n)
        self.n_kinds = len(KIND_NAMES)
        self.n_shapes = len(self.shapes_text)
        self.n_stacks = max(self.stacks.count, 1)
        self.size = max(len(self.names), 1) * self.n_kinds * self.n_shapes * self.n_stacks
        if self.size >= 2**62:
            raise TorchneckError("too many distinct stacks to group by (use a smaller --group-by-stack)")

    def of(self, pos: np.ndarray, kinds: np.ndarray, table: EventTable | None = None) -> np.ndarray:
        """Keys of `pos` (positions of the forest, or rows of `table`: device rows) of `kinds`."""
        t = table if table is not None else self.forest.table
        key = self.name_key[t.name[pos]] + kinds
        if self.n_shapes > 1:
            key = key * self.n_shapes + self.shape_of_args[t.args[pos]]
        if self.n_stacks > 1:
            stack = self.stacks.of(pos) if table is None else np.zeros(len(pos), dtype=np.int64)
            key = key * self.n_stacks + stack
        return key

    def split(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(name string id, kind, shapes index, stack key) of each key."""
        stack = keys % self.n_stacks
        rest = keys // self.n_stacks
        shape = rest % self.n_shapes
        rest //= self.n_shapes
        return self.names[rest // self.n_kinds], rest % self.n_kinds, shape, stack

    def totals(self) -> Totals | DenseTotals:
        return DenseTotals(self.size) if self.size <= DENSE_KEYS else Totals()


def _canonical_shapes(table: EventTable) -> tuple[np.ndarray, list[str]]:
    """Per args id, an index into the distinct `str(input_shapes)` texts torch groups by: a
    tensor's sizes, `[]` for anything else (a scalar, or a TensorList, which the trace's
    "Input Dims" spell out per tensor but torch's `input_shapes` leaves empty)."""
    texts: dict[str, int] = {"[]": 0}
    out = np.zeros(len(table.arg_pairs), dtype=np.int64)
    parsed: dict[int, int] = {}
    for i, shapes_id in enumerate(table.arg_pairs[:, 0].tolist()):
        if shapes_id < 0:
            continue
        if shapes_id not in parsed:
            try:
                dims = json.loads(table.strings[shapes_id])
            except (ValueError, IndexError):
                dims = []
            if not isinstance(dims, list):
                dims = []
            canon = [d if isinstance(d, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in d)
                     else [] for d in dims]
            parsed[shapes_id] = texts.setdefault(str(canon), len(texts))
        out[i] = parsed[shapes_id]
    return out, list(texts)


def _stack_entry_kept(frame: str) -> bool:
    return all(not (a in frame and b in frame) for a, b in STACK_DROPPED)


class _StackKeys:
    """Per position, an id of its first `n` stack frames (0: no stack), and the frames of an id.

    From Python events: a position's stack starts at the innermost Python call open at its
    start; each frame's next is the Python call open around it. Ids are built for the Python
    calls a level at a time (their name, then the id of the next frame's shorter stack), so
    equal frame sequences get one id without hashing tuples per event. From "Call stack" args:
    one id per distinct stack text."""

    def __init__(self, forest: Forest, trace: Trace, n: int):
        self.forest, self.n = forest, n
        self.count = 1
        self.source: str | None = None
        self.frames_of: list[list[str]] = [[]]
        self._first: np.ndarray | None = None
        self._by_call_stack: tuple[np.ndarray, np.ndarray] | None = None
        if n <= 0:
            return
        if forest.is_python is not None:
            self.source = "python_function"
            self._from_python_events()
        elif len(trace.events.call_stack.rows):
            self.source = "call_stack"
            self._from_call_stacks(trace.events)

    def _open_python_ancestor(self, pos: np.ndarray, kept: np.ndarray) -> np.ndarray:
        """The innermost kept Python call enclosing each position and open at its start."""
        f = self.forest
        assert f.is_python is not None
        ts = f.table.ts[pos]
        a = f.parent[pos].astype(np.int64)
        while True:
            climb = a >= 0
            sub = a[climb]
            climb[climb] = ~(kept[sub] & (f.end(sub) >= ts[climb]))
            if not climb.any():
                return a
            a[climb] = f.parent[a[climb]]

    def _from_python_events(self) -> None:
        f = self.forest
        t = f.table
        assert f.is_python is not None
        frame_ok = t.names_matching(_stack_entry_kept)
        kept = f.is_python & frame_ok[t.name]
        frames = np.flatnonzero(kept)
        nxt = np.full(len(t), -1, dtype=np.int64)
        nxt[frames] = self._open_python_ancestor(frames, kept)
        self._first = np.empty(len(t), dtype=np.int64)
        for a in range(0, len(t), ROW_BLOCK):
            pos = np.arange(a, min(a + ROW_BLOCK, len(t)), dtype=np.int64)
            self._first[pos] = self._open_python_ancestor(pos, kept)
        name_rank = np.searchsorted(np.unique(t.name[frames]), t.name[frames]).astype(np.int64) + 1
        key = np.zeros(len(t), dtype=np.int64)  # per frame: id of its stack of `level` frames
        level_key = np.zeros(len(frames), dtype=np.int64)
        for _ in range(self.n):
            up = nxt[frames]
            below = np.where(up >= 0, key[np.maximum(up, 0)], 0)
            pair = name_rank * (int(level_key.max(initial=0)) + int(below.max(initial=0)) + 2) + below
            _, level_key = np.unique(pair, return_inverse=True)
            level_key = level_key.reshape(-1).astype(np.int64) + 1
            key[frames] = level_key
        self._frame_key = key
        self.count = int(level_key.max(initial=0)) + 1
        representative = np.full(self.count, -1, dtype=np.int64)
        representative[level_key[::-1]] = frames[::-1]
        self.frames_of = [[]]
        for k in range(1, self.count):
            fr, out = int(representative[k]), list[str]()
            while fr >= 0 and len(out) < self.n:
                out.append(t.strings[int(t.name[fr])])
                fr = int(nxt[fr])
            self.frames_of.append(out)

    def _from_call_stacks(self, table: EventTable) -> None:
        ids = np.unique(table.call_stack.values).astype(np.int64)
        ids = ids[ids > 0]
        seen: dict[tuple[str, ...], int] = {(): 0}
        keys = np.empty(len(ids), dtype=np.int64)
        for i, sid in enumerate(ids.tolist()):
            frames = tuple(x for x in table.strings[sid - 1].split(";") if x and _stack_entry_kept(x))[: self.n]
            keys[i] = seen.setdefault(frames, len(seen))
        self._by_call_stack = (ids, keys)
        self.count = len(seen)
        self.frames_of = [list(fr) for fr in seen]

    def of(self, pos: np.ndarray) -> np.ndarray:
        if self._first is not None:
            first = self._first[pos]
            return np.where(first >= 0, self._frame_key[np.maximum(first, 0)], 0)
        if self._by_call_stack is not None:
            ids, keys = self._by_call_stack
            at = positions_in(ids, self.forest.table.call_stack[pos].astype(np.int64))
            return np.where(at >= 0, keys[np.maximum(at, 0)], 0)
        return np.zeros(len(pos), dtype=np.int64)

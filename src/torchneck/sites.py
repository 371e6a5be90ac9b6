"""The user's code: which source files are the user's, and how a user line is named in a trace.

Shared by capture (which marks the user's lines while recording) and analysis (which reads them
back), so both sides agree on one definition.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import sysconfig

_LIB_ROOTS = tuple(
    os.path.realpath(p) + os.sep
    for p in {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {sys.prefix, sys.base_prefix, sys.exec_prefix}
    if p
)
_GENERATED_MARK = re.compile(r"[/\\](?:torchinductor_[^/\\]*|torch_compile_debug)[/\\]")
"""Code torch.compile generates (inductor's cache under /tmp/torchinductor_<user>, debug dumps):
it runs from files on disk but is nobody's source."""
TORCHNECK_ROOT = os.path.dirname(os.path.abspath(__file__)) + os.sep


@functools.lru_cache(maxsize=65536)
def _realpath(path: str) -> str:
    """realpath, cached: analyses ask about the same few thousand frame files again and again."""
    return os.path.realpath(path)


@functools.lru_cache(maxsize=65536)
def torchneck_relpath(path: str) -> str | None:
    """The path of a torchneck source file relative to the package ("capture/lines.py"), or None
    for any other file. Also for files of a torchneck installed elsewhere: a run directory
    recorded on another machine names that machine's copy, which is still torchneck's code when
    the same file exists in this package."""
    if not path or path.startswith("<"):
        return None
    real = _realpath(path)
    if real.startswith(TORCHNECK_ROOT):
        return real[len(TORCHNECK_ROOT):].replace(os.sep, "/")
    parts = path.replace("\\", "/").split("/")
    if "torchneck" not in parts:
        return None
    last = len(parts) - 1 - parts[::-1].index("torchneck")  # the innermost folder so named
    rel = parts[last + 1:]
    return "/".join(rel) if rel and os.path.isfile(os.path.join(TORCHNECK_ROOT, *rel)) else None


def is_user_file(path: str) -> bool:
    """True for the user's own source files (not stdlib, site-packages, torchneck, `<frozen>`)."""
    if not path or path.startswith("<"):
        return False
    if "site-packages" in path or "dist-packages" in path or _GENERATED_MARK.search(path):
        return False
    if torchneck_relpath(path) is not None:
        return False
    return not _realpath(path).startswith(_LIB_ROOTS)


def is_torchneck_file(path: str) -> bool:
    return torchneck_relpath(path) is not None


_MARKER_FILE = "capture/lines.py"


def is_hook_file(path: str) -> bool:
    """torchneck's own hooks (step clocks, profiler steps): time in them is torchneck's, not the
    user's. The line marker (capture/lines.py) is excluded: part of its time is the user's call."""
    rel = torchneck_relpath(path)
    return rel is not None and rel != _MARKER_FILE


PASS_THROUGH = frozenset({
    ("capture/window.py", "__next__"),  # the DataLoader iterator's next batch, then a step tick
    ("capture/window.py", "__call__"),  # a compiled module's call, then a step tick
    ("capture/autograd_probe.py", "__call__"),  # the followed model's call (its class's __call__, wrapped)
    ("capture/dynamo_guard.py", "compile"),
    *(("capture/callsites.py", name) for name in ("optimizer_init", "set_num_threads", "compile",
                                                   "set_default_dtype", "from_numpy_", "__init__",
                                                   "dataloader_init")),
    *(("capture/profilers.py", name) for name in ("export_chrome_trace", "kineto_export_chrome_trace")),
})
"""torchneck's wrappers around the program's own calls (file, function): what runs below them is
the wrapped call, the program's time (a DataLoader's batches, a compiled model's steps); only
their own lines, or torchneck's functions they call, are torchneck's."""


def is_pass_through(path: str, function: str) -> bool:
    """`function` (a qualified name: `ProfiledWindow._install_clocks.<locals>.__next__`) in
    `path` is one of torchneck's wrappers (`PASS_THROUGH`)."""
    return (torchneck_relpath(path), function.rsplit(".", 1)[-1]) in PASS_THROUGH


def is_marker_file(path: str) -> bool:
    return torchneck_relpath(path) == _MARKER_FILE


MARKER_CALL_FUNCTION = "call_marked"
"""The function of capture/lines.py that calls the user's torch function: time below it is the
user's call; time elsewhere in the marker (naming the line, opening and closing the span) is
torchneck's overhead."""


LINE_PREFIX = "torchneck@"
"""Name prefix of the `record_function` spans torchneck puts around each torch call made from the
user's code while profiling: `torchneck@<function>@<line>@<file>`."""


def site_name(function: str, line: int, file: str) -> str:
    return f"{LINE_PREFIX}{function}@{line}@{file}"


def parse_site(name: str) -> tuple[str, int, str] | None:
    """(function, line, file) from a `site_name`, or None for any other name."""
    if not name.startswith(LINE_PREFIX):
        return None
    parts = name[len(LINE_PREFIX):].split("@", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1]), parts[2]


TOOL_FRAME = "torchneck: starting or writing the profile"
"""Function name of the sampler's synthetic frame that torchneck's own work inside a sampler check
(starting the profiler, writing its trace) is charged to, instead of the user's interrupted line."""
UNSAMPLED_FRAME = "not sampled: the script's own profiler recorded Python calls"
"""Function name of the sampler's synthetic frame standing for an interval it was paused."""

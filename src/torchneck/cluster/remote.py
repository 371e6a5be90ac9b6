"""Trace files wherever they are: local paths, or any fsspec URL (`s3://`, `gs://`, `https://`...).

The client only lists; each task copies its own rank file from the store to the worker's disk
(compressed, as stored), reads it, and deletes it. Credentials and endpoints come from each
machine's own environment, as every fsspec backend reads them (`AWS_*` and `AWS_ENDPOINT_URL`
for S3, `GOOGLE_APPLICATION_CREDENTIALS` for GCS, `FSSPEC_<PROTOCOL>_<OPTION>` for any option).
"""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from ..errors import TorchneckError
from ..trace.loader import find_trace_files

TRACE_SUFFIXES = (".json", ".json.gz")
NOT_TRACES = frozenset({"report.json", "env.json", "samples.json", "compile.json", "run.json", "job.json",
                        "bisect.json", "report-compile.json"})
"""JSON files of a torchneck run directory that are not traces."""
COPY_CHUNK_BYTES = 8 << 20


def is_url(path: str) -> bool:
    """A path for fsspec (`s3://...`); plain paths and `file://` are read directly."""
    return "://" in str(path) and not str(path).startswith("file://")


def _local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def _is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and name not in NOT_TRACES


def list_traces(paths: list[str]) -> list[str]:
    """Every trace file under `paths` (files, local directories, or URLs of a file or a folder,
    recursively for URLs), in a stable order. One clear error when a path holds none."""
    out: list[str] = []
    for p in paths:
        if not is_url(p):
            out += [str(f) for f in find_trace_files(_local(p))]
            continue
        fs, root = _filesystem(p)
        protocol = p.split("://", 1)[0]
        try:
            if fs.isdir(root):
                found = sorted(f for f in fs.find(root) if _is_trace_name(PurePosixPath(f).name))
                if not found:
                    raise TorchneckError(f"{p}: no trace files (*.json or *.json.gz) there")
                out += [f if "://" in f else f"{protocol}://{f}" for f in found]
            elif fs.exists(root):
                out.append(p)
            else:
                raise TorchneckError(f"{p}: no such file or folder")
        except TorchneckError:
            raise
        except Exception as exc:  # network, credentials, permissions: the backend's own words
            raise TorchneckError(f"{p}: cannot list ({type(exc).__name__}: {_first_line(exc)})") from None
    return out


BACKEND_LOGGERS = ("fsspec", "s3fs", "gcsfs", "aiobotocore", "botocore", "google")
"""Loggers of the storage backends: they log a traceback for every retry (credentials probed,
a host not found). Not printed: what finally failed is said in one line (`list_traces`)."""


def quiet_backend_logs() -> None:
    for name in BACKEND_LOGGERS:
        log = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
            log.addHandler(logging.NullHandler())
        log.propagate = False


def _filesystem(url: str):
    quiet_backend_logs()
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise TorchneckError(f"{url}: remote paths need fsspec: pip install 'torchneck[cluster]'") from None
    try:
        return url_to_fs(url)
    except (ImportError, ValueError) as exc:  # e.g. s3fs missing for s3://
        raise TorchneckError(f"{url}: {_first_line(exc)} (pip install 'torchneck[cluster]')") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@contextlib.contextmanager
def local_copy(path: str) -> Iterator[Path]:
    """A local file holding `path`'s bytes: the file itself, or a copy of a remote one in a
    temporary folder (same name: the rank in a file's name stays readable), removed after."""
    if not is_url(path):
        yield Path(_local(path))
        return
    fs, remote = _filesystem(path)
    folder = tempfile.mkdtemp(prefix="torchneck-rank-")
    try:
        target = Path(folder) / PurePosixPath(remote).name
        with fs.open(remote, "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, COPY_CHUNK_BYTES)
        yield target
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_HANDLER_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d{10,}\.pt\.trace\.json(?:\.gz)?$")
"""`torch.profiler.tensorboard_trace_handler`'s file name: `<host>_<pid>.<ms>.pt.trace.json[.gz]`."""
_RANK_DIR = re.compile(r"^rank[-_]?\d+$", re.IGNORECASE)


def host_of(path: str) -> str | None:
    """The host a trace file's name gives (`tensorboard_trace_handler`'s worker name)."""
    m = _HANDLER_NAME.match(PurePosixPath(_local(path)).name)
    return m.group("host") if m else None


def hosts_by_layout(files: list[str]) -> dict[str, str]:
    """Hosts for files that spread over several folders (`job/node-07/rank-3.json.gz`): the
    folder's name, unless it is a rank's own folder (`rank-3/`), whose parent is used."""
    folders = {}
    for f in files:
        parent = PurePosixPath(_local(f)).parent
        if _RANK_DIR.match(parent.name):
            parent = parent.parent
        folders[f] = parent
    if len(set(folders.values())) < 2:
        return {}
    return {f: d.name for f, d in folders.items() if d.name}


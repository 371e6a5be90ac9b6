"""Open a trace file and read its bytes, decompressed, whatever state the file is in.

A trace is a regular file (plain or gzip), or a stream that can be read once: a pipe
(`torchneck analyze <(zcat trace.json.gz)`), a FIFO, a character device. Reading never raises
for damage: a gzip stream that is cut short, corrupt, followed by garbage, or that expands like a
decompression bomb ends the data where it stops making sense, with a warning; every byte that
decompressed before that point is delivered (the events in it are read). Several gzip members
(what `cat a.gz b.gz` or parallel compressors write) read as one stream.
"""

from __future__ import annotations

import mmap
import os
import select
import stat
import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import TraceError


def _inflater() -> ModuleType:
    """python-isal's zlib (the same API, ~4x faster), imported when a gzip file is read; zlib
    where it is not installed."""
    try:
        from isal import isal_zlib
    except ImportError:  # pragma: no cover - isal is a dependency, but stay usable without it
        return zlib
    return isal_zlib

GZIP_MAGIC = b"\x1f\x8b"

COMPRESSED_PIECE = 16 << 10
"""Compressed bytes handed to the decompressor at once. Where the stream is damaged, the output
of the call that fails is lost: small pieces keep that to a few hundred KB of events (a trace
expands 10-40x), and the calls are still few (64 a MB)."""

BOMB_MIN_BYTES = 2 << 30
"""Decompressed bytes before the expansion ratio is checked: below, any ratio is read."""
MAX_EXPANSION = 200
"""Decompressed bytes per compressed byte beyond which reading stops (after `BOMB_MIN_BYTES`).
Real traces expand 10-40x (36x for an indented PyTorch 1.8 trace); only long runs of one byte
(blanks, one repeated character) expand more, up to deflate's limit of ~1030x. Stopping there
bounds the time a small file can cost: a 100 MB bomb is read for at most 20 GB (~15 s of blanks)."""

PIPE_WAIT_S = 10.0
"""How long a pipe or FIFO may stay silent before its first byte: a FIFO that no program writes
to would otherwise be waited on forever."""


class Source:
    """The decompressed bytes of one trace, read in order (`read`); `total` counts them.
    `plain_file` is True for an uncompressed regular file: it may also be read at any offset
    (the parallel loader's workers do), and `size` is then its length. `tap`, when given, is
    handed every block `read` returns, in order."""

    def __init__(self, path: Path, warnings: list[str], tap: Callable[[bytes], None] | None = None):
        self.path = path
        self.warnings = warnings
        self.tap = tap
        self.total = 0
        self.eof = False
        self.raw, st = _open(path)
        self.size = st.st_size if stat.S_ISREG(st.st_mode) else 0
        head = self._read_raw(2)
        self.compressed = head == GZIP_MAGIC
        self.plain_file = stat.S_ISREG(st.st_mode) and not self.compressed
        if self.plain_file:
            self.raw.seek(0)
            self._gunzip: _Gunzip | None = None
            self._prefix = b""
        else:
            self._gunzip = _Gunzip(self, head) if self.compressed else None
            self._prefix = b"" if self.compressed else head

    def _read_raw(self, size: int) -> bytes:
        """Up to `size` bytes of the file itself (a short read only at its end)."""
        parts: list[bytes] = []
        got = 0
        while got < size:
            try:
                part = self.raw.read(size - got)
            except OSError as exc:
                self.warnings.append(f"reading the file failed ({exc.strerror or exc}); using what came before")
                return b"".join(parts)
            if not part:
                break
            parts.append(part)
            got += len(part)
        return b"".join(parts)

    def read(self, size: int) -> bytes:
        """Up to `size` decompressed bytes; b"" at the end of the data (or where it broke off)."""
        if self.eof:
            return b""
        if self._gunzip is not None:
            data = self._gunzip.read(size)
        else:
            data = self._prefix + self._read_raw(size - len(self._prefix))
            self._prefix = b""
        if not data:
            self.eof = True
        elif self.tap is not None:
            self.tap(data)
        self.total += len(data)
        return data

    def seek(self, offset: int) -> None:
        """Go to `offset` of a plain file (where the next `read` starts)."""
        self.raw.seek(offset)
        self.total = offset
        self.eof = False

    def pread(self, offset: int, size: int) -> bytes:
        """`size` bytes of a plain file at `offset`, without moving where `read` goes on."""
        return os.pread(self.raw.fileno(), size, offset)

    def close(self) -> None:
        try:
            self.raw.close()
        except OSError:
            pass


def _open(path: Path):
    """The file opened for reading, and its stat. A pipe or FIFO is opened without blocking (a
    FIFO with no writer would block `open` forever), then waited on for `PIPE_WAIT_S` at most."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceError(f"{path}: is a directory (pass a trace file, or use load_traces)")
    try:
        if stat.S_ISREG(st.st_mode):
            return open(path, "rb", buffering=0), st
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise TraceError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISFIFO(st.st_mode) and not select.select([fd], [], [], PIPE_WAIT_S)[0]:
        os.close(fd)
        raise TraceError(f"{path}: nothing arrived on this pipe in {PIPE_WAIT_S:.0f} s (is anything writing to it?)")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb", buffering=0), st


class _Gunzip:
    """Decompresses a gzip stream piece by piece (`COMPRESSED_PIECE` in, `size` out at most), member
    after member, turning every way it can break into an end of data and one warning.

    The members' framing (header, CRC-32 and size trailer) is read here and their deflate data
    inflated raw: a checksum that fails is then a warning about data already delivered, not an
    error that loses the last piece (zlib's gzip mode raises it with that piece's output)."""

    def __init__(self, source: Source, head: bytes):
        self.source = source
        self.pending = head  # compressed bytes read but not yet inflated
        self.zlib = _inflater()
        self.inflate: Any = None  # the current member's inflater (zlib's or isal's); None between members
        self.crc = 0
        self.out = 0  # bytes decompressed so far
        self.member_out = 0  # of which by the current member
        self.member_at = 0  # where the current member began in the file
        self.consumed = len(head)  # compressed bytes read
        self.done = False

    def _more(self) -> bytes:
        data = self.source._read_raw(COMPRESSED_PIECE)
        self.consumed += len(data)
        return data

    def _at_least(self, n: int) -> bool:
        """Whether `n` bytes are pending (reading more as needed)."""
        while len(self.pending) < n:
            more = self._more()
            if not more:
                return False
            self.pending += more
        return True

    def read(self, size: int) -> bytes:
        out: list[bytes] = []
        want = size
        while want > 0 and not self.done:
            if self.inflate is None and not self._start_member():
                break
            if not self.pending:
                self.pending = self._more()
                if not self.pending:
                    self._stop("ends")
                    break
            try:
                piece = self.inflate.decompress(self.pending, want)
            except Exception as exc:  # zlib.error, isal's IsalError: damaged data
                self._stop("damaged", exc)
                break
            self.pending = self.inflate.unconsumed_tail
            if piece:
                out.append(piece)
                want -= len(piece)
                self.out += len(piece)
                self.member_out += len(piece)
                self.crc = self.zlib.crc32(piece, self.crc)
            if self.inflate.eof:
                self.pending = self.inflate.unused_data + self.pending
                self._end_member()
            elif self.out > BOMB_MIN_BYTES and self.out > MAX_EXPANSION * self.consumed:
                self.done = True
                self.source.warnings.append(
                    f"the compressed data expands over {MAX_EXPANSION}x (a decompression bomb?); reading stopped "
                    f"after {self.out / 2**30:.1f} GB")
        return b"".join(out)

    def _start_member(self) -> bool:
        """Read a member's header; at the end of the data, after zero padding, or before bytes
        that are not gzip, stop (False)."""
        if not self._at_least(1):
            self.done = True
            return False
        while not self.pending.strip(b"\x00"):  # padding to a block size: nothing lost
            self.pending = self._more()
            if not self.pending:
                self.done = True
                return False
        at = self.consumed - len(self.pending)
        header = self._header_length()
        if header is None:
            self.done = True
            if self.out:
                self.source.warnings.append(f"bytes after the compressed data were ignored (from byte {at:,} of the "
                                            "file: not a gzip member)")
            else:
                self.source.warnings.append("the compressed data is damaged at its start (no valid gzip header)")
            return False
        self.pending = self.pending[header:]
        self.inflate = self.zlib.decompressobj(-15)
        self.crc = self.member_out = 0
        self.member_at = at
        return True

    def _header_length(self) -> int | None:
        """The length of the gzip header that `pending` starts with, or None if it is not one."""
        if not self._at_least(10) or self.pending[:3] != GZIP_MAGIC + b"\x08":
            return None
        flags, pos = self.pending[3], 10
        if flags & 4:  # FEXTRA: a length, then that many bytes
            if not self._at_least(pos + 2):
                return None
            pos += 2 + int.from_bytes(self.pending[pos:pos + 2], "little")
        for flag in (8, 16):  # FNAME, FCOMMENT: zero-terminated
            if flags & flag:
                while (end := self.pending.find(b"\x00", pos)) < 0:
                    if len(self.pending) > _HEADER_LIMIT or not self._at_least(len(self.pending) + 1):
                        return None
                pos = end + 1
        if flags & 2:  # FHCRC
            pos += 2
        return pos if self._at_least(pos) else None

    def _end_member(self) -> None:
        """A member's deflate data ended: check its CRC-32 and size; then the next member."""
        self.inflate = None
        if not self._at_least(8):
            self.source.warnings.append("the compressed data ends early (its last checksum is missing); all of it "
                                        "was read")
            self.done = True
            return
        crc, size = int.from_bytes(self.pending[:4], "little"), int.from_bytes(self.pending[4:8], "little")
        self.pending = self.pending[8:]
        if crc != self.crc or size != self.member_out & 0xFFFFFFFF:
            self.source.warnings.append(f"the compressed data fails its checksum (from byte {self.member_at:,} of "
                                        "the file): it may be damaged; its events were read as they decompressed")

    def _stop(self, how: str, exc: Exception | None = None) -> None:
        """The stream ended (`ends`) or broke (`damaged`) inside a member's deflate data."""
        self.done = True
        if how == "ends":
            self.source.warnings.append(
                f"the compressed data ends early (the file is cut short after {self.consumed / 2**20:.1f} MB); "
                f"the {self.out / 2**20:.1f} MB decompressed before the cut were read")
        else:
            reason = str(exc).split(":")[-1].strip() or type(exc).__name__
            where = self.consumed - len(self.pending)
            self.source.warnings.append(f"the compressed data is damaged near byte {where:,} of the file "
                                        f"({reason}); the events before it were read")


_HEADER_LIMIT = 1 << 20
"""A gzip header's file name or comment longer than this is not one (garbage that began with the
magic bytes)."""


def read_range(path: str, start: int, stop: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(stop - start)


_READ_BUFFERS = threading.local()


def read_range_reused(path: str, start: int, stop: int) -> tuple[bytearray, int]:
    """Bytes [start, stop) of the file into this thread's reused buffer: (buffer, length).
    A fresh `bytes` a slice (`BLOCK_BYTES`) would be new pages each time, zeroed by the kernel
    (measured at 8 MB slices: ~2000 page faults a slice, a tenth of the load time), once large
    blocks are mapped on their own (`return_large_frees_promptly`)."""
    want = stop - start
    buf = getattr(_READ_BUFFERS, "buf", None)
    if buf is None or len(buf) < want:
        buf = _READ_BUFFERS.buf = bytearray(want)
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        got = 0
        with memoryview(buf) as view:
            while got < want:
                n = f.readinto(view[got:want])
                if not n:
                    break
                got += n
    return buf, got


def map_range(path: str, start: int, stop: int) -> tuple[mmap.mmap, int]:
    """A read-only mapping of the file from `start` (rounded down to the mapping granularity)
    to `stop`, and where `start` lies in it. Raises ValueError when the file no longer reaches
    `stop` (cut while being read): reading a mapped page past the end would kill the process
    (SIGBUS), where read() just comes back short."""
    base = start - start % mmap.ALLOCATIONGRANULARITY
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size < stop:
            raise ValueError(f"{path} is shorter than when it was opened")
        return mmap.mmap(f.fileno(), stop - base, offset=base, access=mmap.ACCESS_READ), start - base

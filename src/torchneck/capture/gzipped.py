"""Writing traces gzipped: isal's igzip when installed (several times faster than gzip)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def gzip_file(src: Path, dst: Path) -> None:
    """`src` gzipped (fast, level 1) into `dst`, renamed into place once whole; `src` removed."""
    gz: Any
    try:
        from isal import igzip as gz
    except ImportError:  # pragma: no cover
        import gzip as gz
    part = dst.with_name(dst.name + ".part")  # `dst` appears whole or not at all
    try:
        with open(src, "rb") as fin, gz.open(part, "wb", compresslevel=1) as fout:
            while True:
                block = fin.read(8 << 20)
                if not block:
                    break
                fout.write(block)
        os.replace(part, dst)
    except BaseException:  # a full disk, an interrupt: no half-written file is left; `src` stays
        part.unlink(missing_ok=True)
        raise
    src.unlink()


def gzip_copy(src: Path, dst: Path) -> None:
    """The script's own trace, gzipped into the run directory (or copied, when gzipped already)."""
    import shutil

    if src.suffix == ".gz":
        shutil.copyfile(src, dst)
        return
    tmp = dst.with_suffix(".tmp")
    shutil.copyfile(src, tmp)
    gzip_file(tmp, dst)
